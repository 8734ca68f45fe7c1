// The browser side of run.mjs: loads the request, runs the model on the requested execution
// provider, posts each output back as .npy and then a summary to /done.
import * as ort from '/ort/ort.webgpu.min.mjs';

const NPY_TYPES = {
  '<f4': ['float32', Float32Array],
  '<f8': ['float64', Float64Array],
  '<f2': ['float16', Uint16Array],
  '|i1': ['int8', Int8Array],
  '|u1': ['uint8', Uint8Array],
  '<i2': ['int16', Int16Array],
  '<u2': ['uint16', Uint16Array],
  '<i4': ['int32', Int32Array],
  '<u4': ['uint32', Uint32Array],
  '<i8': ['int64', BigInt64Array],
  '<u8': ['uint64', BigUint64Array],
  '|b1': ['bool', Uint8Array],
};
const DESCR = Object.fromEntries(Object.entries(NPY_TYPES).map(([d, [t]]) => [t, d]));

function parseNpy(buf) {
  const bytes = new Uint8Array(buf);
  if (bytes[0] !== 0x93 || String.fromCharCode(...bytes.slice(1, 6)) !== 'NUMPY') throw new Error('not a .npy file');
  const major = bytes[6];
  const view = new DataView(buf);
  const headerLen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder().decode(bytes.slice(start, start + headerLen));
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error('fortran order is not supported');
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header)[1];
  const shape = shapeText.split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const entry = NPY_TYPES[descr];
  if (!entry) throw new Error(`unsupported dtype ${descr}`);
  const [type, Ctor] = entry;
  const body = buf.slice(start + headerLen);
  return new ort.Tensor(type, new Ctor(body), shape);
}

function npyBytes(tensor) {
  const descr = DESCR[tensor.type];
  if (!descr) throw new Error(`output type ${tensor.type} cannot be written as .npy`);
  const shape = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const head = new Uint8Array(10 + header.length);
  head.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0]);
  new DataView(head.buffer).setUint16(8, header.length, true);
  head.set(new TextEncoder().encode(header), 10);
  const data = tensor.data;
  const body = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const out = new Uint8Array(head.length + body.length);
  out.set(head);
  out.set(body, head.length);
  return out;
}

async function post(url, body) {
  const r = await fetch(url, { method: 'POST', body });
  if (!r.ok) throw new Error(`POST ${url}: ${r.status}`);
}

async function adapterInfo() {
  if (!navigator.gpu) return { available: false };
  const a = await navigator.gpu.requestAdapter();
  if (!a) return { available: false };
  const info = a.info || {};
  return {
    available: true,
    vendor: info.vendor || '',
    architecture: info.architecture || '',
    description: info.description || '',
    is_fallback: Boolean(a.isFallbackAdapter || info.isFallbackAdapter),
    max_buffer_size: Number(a.limits.maxBufferSize),
    shader_f16: a.features.has('shader-f16'),
  };
}

// One model: create the session, run every run, post the outputs as `${prefix}r{R}_o{K}.npy`.
// Fills `rec` (ok, stage, error, output_names, runs).
async function runJob(job, modelUrl, prefix, provider, rec) {
  let stage = 'session';
  try {
    const model = new Uint8Array(await (await fetch(modelUrl)).arrayBuffer());
    // force_cpu_nodes: node names the WebGPU provider must leave to the CPU (its own
    // forceCpuNodeNames option, an alternative to layer_ann + session.layer_assignment_settings).
    const ep = provider === 'webgpu' && Array.isArray(job.force_cpu_nodes) && job.force_cpu_nodes.length
      ? { name: 'webgpu', forceCpuNodeNames: job.force_cpu_nodes }
      : provider;
    const options = {
      executionProviders: [ep],
      logSeverityLevel: 0,
      logVerbosityLevel: 0,
      graphOptimizationLevel: job.graph_optimization_level || 'all',
      extra: job.session || {},
    };
    const session = await ort.InferenceSession.create(model, options);
    rec.output_names = session.outputNames;
    rec.runs = [];
    for (let r = 0; r < job.runs.length; r++) {
      stage = `run ${r + 1}`;
      const feeds = {};
      for (const inp of job.runs[r].inputs) {
        feeds[inp.name] = parseNpy(await (await fetch(`/data/${inp.file}`)).arrayBuffer());
      }
      const t0 = performance.now();
      const results = await session.run(feeds);
      const ms = performance.now() - t0;
      const outputs = [];
      for (let k = 0; k < session.outputNames.length; k++) {
        const name = session.outputNames[k];
        const file = `${prefix}r${r}_o${k}.npy`;
        await post(`/out/${file}`, npyBytes(results[name]));
        outputs.push({ name, file });
      }
      rec.runs.push({ outputs, ms });
    }
    await session.release();
    rec.ok = true;
  } catch (e) {
    rec.ok = false;
    rec.stage = stage;
    rec.error = String(e && e.message ? e.message : e);
  }
}

async function main() {
  const summary = { ok: false, runtime: { onnxruntime_web: ort.env.versions ? ort.env.versions.web : '' } };
  try {
    const request = await (await fetch('/request.json')).json();
    const provider = request.provider || 'webgpu';
    summary.provider = provider;
    summary.adapter = await adapterInfo();
    if (provider === 'webgpu' && !summary.adapter.available) throw new Error('the browser exposes no WebGPU adapter');
    ort.env.wasm.wasmPaths = '/ort/';
    ort.env.logLevel = 'verbose';
    if (Array.isArray(request.jobs)) {
      // Many models in one browser (a survey): each job's log starts with a marker line.
      summary.jobs = [];
      for (let j = 0; j < request.jobs.length; j++) {
        console.log(`=== job ${j}`);
        const rec = {};
        await runJob(request.jobs[j], `/model/${j}`, `j${j}_`, provider, rec);
        summary.jobs.push(rec);
      }
      summary.ok = true;
    } else {
      await runJob(request, '/model.onnx', '', provider, summary);
    }
  } catch (e) {
    summary.stage = 'adapter';
    summary.error = String(e && e.message ? e.message : e);
  }
  await post('/done', JSON.stringify(summary));
}

main();
