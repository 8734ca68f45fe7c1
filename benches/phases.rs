#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::Instant;
fn main() {
    let p = std::path::PathBuf::from(std::env::args().nth(1).unwrap());
    let t = Instant::now();
    let mut src = onnx_safeify::io::load_model(&p).unwrap();
    let t1 = t.elapsed();
    let proto = std::mem::take(&mut src.proto);
    let m = onnx_safeify::import::import_model(proto, Some(&src.external)).unwrap();
    let t2 = t.elapsed();
    let e = onnx_safeify::export::export_model(&m);
    let t3 = t.elapsed();
    let sources = vec![onnx_safeify::io::save::Source::new(src.bytes.clone(), p.clone())];
    onnx_safeify::io::save_model(e, std::path::Path::new("/tmp/phase.onnx"), Some(&src.external), sources, &Default::default()).unwrap();
    let t4 = t.elapsed();
    eprintln!("load {:?} import {:?} export {:?} save {:?}", t1, t2-t1, t3-t2, t4-t3);
}
