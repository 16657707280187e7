// ONNX Runtime's CPU library (npm onnxruntime-node, a peer; install with
// `npm install --ignore-scripts onnxruntime-node`) timing a model's forward with one
// thread: `node ort_time.js MODEL.onnx IN.npy REPEATS` prints "forward_s <median>" after
// one warm-up, as `tessera-onnx time` does. NODE_PATH must reach the package.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

// A float32 or float64 .npy file (little-endian, C order) as an ort.Tensor.
function readNpy(path) {
  const bytes = fs.readFileSync(path);
  const major = bytes[6];
  const headerLength = major === 1 ? bytes.readUInt16LE(8) : bytes.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + headerLength;
  const header = bytes.toString('latin1', major === 1 ? 10 : 12, start);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').filter((s) => s.trim()).map(Number);
  const data = bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + bytes.length);
  if (descr === '<f4') return new ort.Tensor('float32', new Float32Array(data), shape);
  if (descr === '<f8') return new ort.Tensor('float64', new Float64Array(data), shape);
  throw new Error(`${path}: dtype ${descr} is not float32 or float64`);
}

async function main() {
  const [model, input, repeatsText] = process.argv.slice(2);
  const repeats = Number(repeatsText);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all'});
  const feeds = {[session.inputNames[0]]: readNpy(input)};
  await session.run(feeds);
  const seconds = [];
  for (let r = 0; r < repeats; ++r) {
    const start = process.hrtime.bigint();
    await session.run(feeds);
    seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
  }
  seconds.sort((a, b) => a - b);
  console.log(`forward_s ${seconds[Math.floor(seconds.length / 2)]}`);
}

main().catch((e) => { console.error(`ort_time: ${e.message}`); process.exit(2); });
