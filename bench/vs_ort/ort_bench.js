// Times one ONNX model in ONNX Runtime (onnxruntime-node) on the input stored next to it
// (MODEL.npy, float32, C order), the way bench/vs_ort times braid-run: warm-up runs, then the
// median of the timed ones. Prints one JSON object.
//
//   node ort_bench.js MODEL.onnx THREADS ITERATIONS [OUTPUT.bin]
// OUTPUT.bin receives the first output's float32 values (for the agreement check).
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');
const { readNpy } = require('./npy');

async function main() {
  const [model, threadsArg, itersArg, outPath] = process.argv.slice(2);
  const threads = Number(threadsArg), iterations = Number(itersArg);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const input = readNpy(model.replace(/\.onnx$/, '.npy'));
  const feeds = { [session.inputNames[0]]: new ort.Tensor(input.dtype, input.data, input.shape) };
  const first = await session.run(feeds);
  if (outPath) fs.writeFileSync(outPath, Buffer.from(first[session.outputNames[0]].data.buffer));
  for (let i = 0; i < Math.max(3, iterations / 10); ++i) await session.run(feeds);
  const times = [];
  for (let i = 0; i < iterations; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  const n = times.length;
  const median = n % 2 ? times[(n - 1) / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  console.log(JSON.stringify({ runtime: 'ort', version: ort.env.versions.common, model, threads, median_ms: median }));
}

main().catch((e) => {
  console.error(`ort_bench: ${e.message}`);
  process.exit(1);
});
