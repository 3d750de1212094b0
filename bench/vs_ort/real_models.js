// braid against ONNX Runtime on the real-model suite's models (tests/models/), at 1 and 2
// threads, on the inputs the suite wrote: one op_profile.js run per model and thread count
// (medians of N iterations each), printed as a markdown table of latencies and ratios, with the
// CPU model. Run the suite first (tests/models/run.sh BUILD_DIR) so that the models, their
// inputs and onnxruntime-node are in BUILD_DIR/models.
//
//   node real_models.js BUILD_DIR [--iter N] [--threads 1,2] [--skip NAME,...] [--json]
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');

function main() {
  const argv = process.argv.slice(2);
  const build = argv[0];
  let iter = 20, threads = [1, 2], skip = [], json = false;
  for (let i = 1; i < argv.length; ++i) {
    if (argv[i] === '--iter') iter = Number(argv[++i]);
    else if (argv[i] === '--threads') threads = argv[++i].split(',').map(Number);
    else if (argv[i] === '--skip') skip = argv[++i].split(',');
    else if (argv[i] === '--json') json = true;
  }
  if (!build) {
    console.error('usage: node real_models.js BUILD_DIR [--iter N] [--threads 1,2] [--skip NAME,...] [--json]');
    process.exit(2);
  }
  const work = path.join(build, 'models');
  const files = path.join(work, 'files');
  if (!fs.existsSync(files)) {
    console.error(`real_models: ${files} is missing: run tests/models/run.sh ${build} first`);
    process.exit(2);
  }
  const rows = [];
  let isa = '?';
  for (const file of fs.readdirSync(files).filter((f) => f.endsWith('.onnx')).sort()) {
    const name = file.replace(/\.onnx$/, '');
    if (skip.includes(name)) continue;
    const inputsDir = path.join(work, 'runs', name, 'inputs');
    if (!fs.existsSync(inputsDir)) continue;
    const inputs = fs.readdirSync(inputsDir).filter((f) => f.endsWith('.npy'))
      .map((f) => `${f.replace(/\.npy$/, '')}=${path.join(inputsDir, f)}`);
    const row = { model: name };
    for (const t of threads) {
      const run = spawnSync('node', [path.join(__dirname, 'op_profile.js'), build, path.join(files, file),
                                     ...inputs, '--threads', String(t), '--iter', String(iter), '--json'],
                            { encoding: 'utf8', timeout: 600000 });
      if (run.status !== 0) {
        row[`t${t}`] = { error: (run.stderr || run.stdout).trim().split('\n').slice(-1)[0] };
        continue;
      }
      const r = JSON.parse(run.stdout);
      row[`t${t}`] = { braid: r.braid_median_ms, ort: r.ort_median_ms };
      isa = r.isa;
    }
    rows.push(row);
  }
  if (json) {
    console.log(JSON.stringify({ cpu: os.cpus()[0].model, isa, iterations: iter, rows }));
    return;
  }
  console.log(`${os.cpus()[0].model}, ${os.cpus().length} cores, braid's kernels: ${isa}; medians of ${iter} runs each`);
  const head = threads.map((t) => `braid / ORT ms, ${t} thr | ratio`).join(' | ');
  console.log(`| model | ${head} |`);
  console.log(`| --- |${threads.map(() => ' ---: | ---: |').join('')}`);
  for (const row of rows) {
    const cells = threads.map((t) => {
      const c = row[`t${t}`];
      if (!c || c.error) return `error: ${c ? c.error : '?'} | `;
      return `${c.braid.toFixed(3)} / ${c.ort.toFixed(3)} | ${(c.braid / c.ort).toFixed(2)}`;
    });
    console.log(`| ${row.model} | ${cells.join(' | ')} |`);
  }
}

main();
