// ONNX Runtime's output for one input, for the zoo check (check_zoo.py): 
//   node ort_run.js MODEL.onnx IN.npy OUT.npy
// IN.npy is float32 (C order); OUT.npy is written float32. onnxruntime-node (npm, installed
// with --ignore-scripts) must be reachable through NODE_PATH.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

function readNpyFloat32(path) {
  const bytes = fs.readFileSync(path);
  const headerLength = bytes[6] === 1 ? bytes.readUInt16LE(8) : bytes.readUInt32LE(8);
  const start = (bytes[6] === 1 ? 10 : 12) + headerLength;
  const header = bytes.toString('latin1', 0, start);
  if (!/'descr':\s*'<f4'/.test(header)) throw new Error(`${path}: not a little-endian float32 .npy`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').filter((s) => s.trim()).map(Number);
  const data = new Float32Array(bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + bytes.length));
  return new ort.Tensor('float32', data, shape);
}

function writeNpyFloat32(path, tensor) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${tensor.dims.join(', ')}${tensor.dims.length === 1 ? ',' : ''}), }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';  // the whole header a multiple of 64 bytes
  const prefix = Buffer.alloc(10);
  Buffer.from('\x93NUMPY', 'latin1').copy(prefix, 0);
  prefix[6] = 1;
  prefix[7] = 0;
  prefix.writeUInt16LE(header.length, 8);
  fs.writeFileSync(path, Buffer.concat([prefix, Buffer.from(header, 'latin1'), Buffer.from(tensor.data.buffer)]));
}

async function main() {
  const [model, input, output] = process.argv.slice(2);
  const session = await ort.InferenceSession.create(model, {intraOpNumThreads: 1});
  const result = await session.run({[session.inputNames[0]]: readNpyFloat32(input)});
  writeNpyFloat32(output, result[session.outputNames[0]]);
}

main().catch((e) => { console.error(`ort_run: ${e.message}`); process.exit(2); });
