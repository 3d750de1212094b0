// Reading NumPy .npy files (C order, little-endian) into typed arrays for onnxruntime-node:
// shared by the benchmark scripts of this folder.
'use strict';
const fs = require('fs');

const NPY_DTYPES = { '<f4': ['float32', Float32Array], '<i8': ['int64', BigInt64Array],
                     '<i4': ['int32', Int32Array], '<f8': ['float64', Float64Array],
                     '|u1': ['uint8', Uint8Array], '|b1': ['bool', Uint8Array] };

//! {dtype, data, shape} of the array in `file`.
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + headerLen;
  const header = buf.toString('latin1', major === 1 ? 10 : 12, start);
  const descr = header.match(/'descr': '([^']*)'/)[1];
  if (!NPY_DTYPES[descr]) throw new Error(`${file}: dtype ${descr} is not read here`);
  const [dtype, Arr] = NPY_DTYPES[descr];
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((s) => s.trim() !== '')
    .map((s) => Number(s.trim()));
  const bytes = buf.buffer.slice(buf.byteOffset + start, buf.byteOffset + buf.length);
  return { dtype, data: new Arr(bytes), shape };
}

module.exports = { readNpy };
