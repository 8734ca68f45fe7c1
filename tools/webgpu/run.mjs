// Runs one ONNX model on onnxruntime-web's WebGPU execution provider inside headless Chromium.
//
//   node run.mjs REQUEST_DIR
//
// REQUEST_DIR/request.json (written by `onnx-safeify verify --runtime webgpu`, or by a test):
//   { "model": "/abs/model.onnx",
//     "runs": [ { "inputs": [ { "name": "x", "file": "r0_i0.npy" } ] } ],
//     "session": { "key": "value" },        // session config entries (optional)
//     "provider": "webgpu" | "wasm",         // default webgpu
//     "force_cpu_nodes": ["name", ...],      // WebGPU EP option forceCpuNodeNames (optional)
//     "graph_optimization_level": "all",     // disabled | basic | extended | all
//     "timeout_ms": 120000 }
// or, for a survey of many models in one browser, { "jobs": [ {model, runs, session, ...} ],
// "provider", "timeout_ms" }: job J's outputs are jJ_rR_oK.npy, result.json has "jobs": [...]
// and the console log holds a line "=== job J" before each job's lines.
// Input files are .npy in REQUEST_DIR. The page writes every output of run R, output K as
// REQUEST_DIR/r{R}_o{K}.npy and this script writes REQUEST_DIR/result.json:
//   { "ok": true, "runtime": {...}, "adapter": {...}, "runs": [ { "outputs": [ {name, file} ] } ],
//     "log": [ "console lines" ] }
// or { "ok": false, "stage": "...", "error": "...", "log": [...] }.
// Exit status: 0 when result.json was written (even with ok=false), 2 otherwise.
//
// The page is served from 127.0.0.1 on an ephemeral port with the cross-origin isolation
// headers that onnxruntime-web's threaded WebAssembly needs. Only the page, the
// onnxruntime-web dist files, the model and the request's own files are served.

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const DIST = path.join(HERE, 'node_modules', 'onnxruntime-web', 'dist');
const SAFE_NAME = /^[A-Za-z0-9_.-]+$/;
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json',
  '.npy': 'application/octet-stream',
  '.onnx': 'application/octet-stream',
};

const dir = process.argv[2];
if (!dir) {
  process.stderr.write('usage: node run.mjs REQUEST_DIR\n');
  process.exit(2);
}
const resultPath = path.join(dir, 'result.json');
const log = [];
let browser = null;
let server = null;
let finished = false;

function writeResult(obj) {
  if (finished) return;
  finished = true;
  obj.log = log;
  fs.writeFileSync(resultPath + '.tmp', JSON.stringify(obj));
  fs.renameSync(resultPath + '.tmp', resultPath);
}

async function shutdown(code) {
  try {
    if (browser) await browser.close();
  } catch (_) {
    // the browser may already be gone
  }
  try {
    if (server) server.close();
  } catch (_) {
    // nothing to do
  }
  process.exit(code);
}

for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
  process.on(sig, () => {
    writeResult({ ok: false, stage: 'harness', error: `interrupted by ${sig}` });
    shutdown(2);
  });
}

function send(res, status, body, type) {
  res.writeHead(status, {
    'Content-Type': type || 'text/plain; charset=utf-8',
    'Cross-Origin-Opener-Policy': 'same-origin',
    'Cross-Origin-Embedder-Policy': 'require-corp',
    'Cache-Control': 'no-store',
  });
  res.end(body);
}

function serveFile(res, file) {
  fs.readFile(file, (err, data) => {
    if (err) return send(res, 404, 'not found');
    send(res, 200, data, TYPES[path.extname(file)] || 'application/octet-stream');
  });
}

async function main() {
  let request;
  try {
    request = JSON.parse(fs.readFileSync(path.join(dir, 'request.json'), 'utf8'));
  } catch (e) {
    writeResult({ ok: false, stage: 'request', error: `cannot read request.json: ${e.message}` });
    return shutdown(0);
  }
  const timeoutMs = Number(request.timeout_ms) > 0 ? Number(request.timeout_ms) : 120000;
  const timer = setTimeout(() => {
    writeResult({ ok: false, stage: 'timeout', error: `no result within ${timeoutMs} ms` });
    shutdown(0);
  }, timeoutMs);
  timer.unref();

  let done;
  const donePromise = new Promise((resolve) => (done = resolve));

  server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    const p = url.pathname;
    if (req.method === 'POST') {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        const name = p.slice('/out/'.length);
        if (p.startsWith('/out/') && SAFE_NAME.test(name) && name.endsWith('.npy')) {
          fs.writeFileSync(path.join(dir, name), body);
          send(res, 200, 'ok');
        } else if (p === '/done') {
          send(res, 200, 'ok');
          done(JSON.parse(body.toString('utf8')));
        } else {
          send(res, 404, 'not found');
        }
      });
      return;
    }
    if (p === '/' || p === '/page.html') return serveFile(res, path.join(HERE, 'page.html'));
    if (p === '/page.mjs') return serveFile(res, path.join(HERE, 'page.mjs'));
    if (p === '/request.json') return send(res, 200, JSON.stringify(request), TYPES['.json']);
    if (p === '/model.onnx') return serveFile(res, request.model);
    if (p.startsWith('/model/') && Array.isArray(request.jobs)) {
      const job = request.jobs[Number(p.slice('/model/'.length))];
      if (job) return serveFile(res, job.model);
    }
    if (p.startsWith('/ort/')) {
      const name = p.slice('/ort/'.length);
      if (SAFE_NAME.test(name)) return serveFile(res, path.join(DIST, name));
    }
    if (p.startsWith('/data/')) {
      const name = p.slice('/data/'.length);
      if (SAFE_NAME.test(name) && name.endsWith('.npy')) return serveFile(res, path.join(dir, name));
    }
    return send(res, 404, 'not found');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = server.address().port;

  const executablePath = process.env.ONNX_SAFEIFY_CHROMIUM || '/usr/bin/chromium';
  try {
    browser = await chromium.launch({
      executablePath,
      headless: true,
      args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-dev-shm-usage'],
      timeout: 60000,
    });
  } catch (e) {
    writeResult({ ok: false, stage: 'browser', error: `cannot start ${executablePath}: ${e.message.split('\n')[0]}` });
    return shutdown(0);
  }
  const page = await browser.newPage();
  page.on('console', (msg) => log.push(msg.text()));
  page.on('pageerror', (err) => log.push(`pageerror: ${err.message}`));
  await page.goto(`http://127.0.0.1:${port}/page.html`);
  const result = await donePromise;
  clearTimeout(timer);
  result.runtime = { ...(result.runtime || {}), browser: browser.version() };
  writeResult(result);
  return shutdown(0);
}

main().catch((e) => {
  writeResult({ ok: false, stage: 'harness', error: String(e && e.message ? e.message : e).split('\n')[0] });
  shutdown(0);
});
