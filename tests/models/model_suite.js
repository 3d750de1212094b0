// The real-model suite: ONNX files as they ship inside public npm packages (tests/models/
// models.json), each run through braid (braid-run) and through ONNX Runtime (onnxruntime-node,
// a test-only dependency) on the same input, outputs compared.
//
//   node model_suite.js BUILD_DIR [--only NAME[,NAME...]] [--iter N]
//
// Setup goes into BUILD_DIR/models: `npm pack` fetches each package once (the file's sha256 is
// checked against the manifest), onnxruntime-node is installed there by npm. Inputs come from
// the manifest's recipe (seeded, so every run feeds the same values) and are written as .npy
// files that both runtimes read. Writes BUILD_DIR/model_suite.json: per model, the result,
// the largest difference relative to the output's largest magnitude, and both runtimes'
// median times (1 thread).
//
// A model passes when every output is within 1e-4 of ONNX Runtime's, relative to the output's
// largest magnitude; a model whose outputs move more than that when its input moves by one ulp
// (`"tolerance": "ort_ulp_noise"`, with `tolerance_why`) is held to twice what ONNX Runtime
// gives against itself on an input with one element in ten moved by one ulp.
// A model's `expect` is "pass" or "fail" (with `tracking`: the issue that will make it run).
// Exit status: 0 when every model does what it is expected to; 1 when one that should pass
// fails, or one expected to fail now passes (then mark it "pass"); 77 (a skip) when node's
// registry or the packages cannot be reached, with the reason on stderr.
'use strict';
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { SKIP, Offline, npm, fetchModel, makeInput, writeNpy, readNpy } = require('./suite_lib');

const here = __dirname;

function parseArgs(argv) {
  const args = { build: null, only: null, iter: 5 };
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--only') args.only = new Set(argv[++i].split(','));
    else if (argv[i] === '--iter') args.iter = Number(argv[++i]);
    else if (!args.build) args.build = argv[i];
    else throw new Error(`unexpected argument "${argv[i]}"`);
  }
  if (!args.build) throw new Error('usage: node model_suite.js BUILD_DIR [--only NAMES] [--iter N]');
  if (!(args.iter >= 1)) throw new Error('--iter takes a whole number of at least 1');
  return args;
}

function installOrt(work) {
  if (fs.existsSync(path.join(work, 'node_modules', 'onnxruntime-node'))) return;
  fs.copyFileSync(path.join(here, 'package.json'), path.join(work, 'package.json'));
  // The package ships its CPU build; its install script only fetches CUDA libraries.
  npm(['install', '--no-audit', '--no-fund', '--ignore-scripts', '--silent'], work);
}

// ---------------------------------------------------------------- comparing
// The largest and the mean |braid - ort| over the output's largest |ort| (1 when the output is
// all zeros).
function compare(braid, ort) {
  const same = braid.shape.length === ort.dims.length && braid.shape.every((d, i) => d === ort.dims[i]);
  if (!same) return { error: `shape ${JSON.stringify(braid.shape)} vs ONNX Runtime's ${JSON.stringify(ort.dims)}` };
  const a = braid.data, b = ort.data;
  let scale = 0, diff = 0, sum = 0;
  for (let i = 0; i < b.length; ++i) {
    const bv = Number(b[i]);
    const av = Number(a[i]);
    if (Number.isNaN(av) !== Number.isNaN(bv)) return { error: `element ${i}: ${av} vs ${bv}` };
    if (Number.isNaN(bv)) continue;
    scale = Math.max(scale, Math.abs(bv));
    diff = Math.max(diff, Math.abs(av - bv));
    sum += Math.abs(av - bv);
  }
  const s = scale > 0 ? scale : 1;
  return { rel: diff / s, mean_rel: sum / Math.max(1, b.length) / s };
}

// The feeds with one element in ten of every float32 input moved by one ulp.
function nudged(ort, feeds) {
  const out = {};
  for (const [name, t] of Object.entries(feeds)) {
    if (t.type !== 'float32') {
      out[name] = t;
      continue;
    }
    const data = new Float32Array(t.data);
    const bits = new Uint32Array(data.buffer);
    for (let i = 0; i < bits.length; i += 10) bits[i] += 1;
    out[name] = new ort.Tensor('float32', data, t.dims);
  }
  return out;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

// ---------------------------------------------------------------- one model
async function runModel(ort, m, work, build, suiteIter) {
  const iter = Math.min(suiteIter, m.iter || suiteIter); // a slow model may ask for fewer runs
  const row = { model: m.name, package: `${m.package}@${m.version}`, expect: m.expect };
  const file = fetchModel(m, work);
  const dir = path.join(work, 'runs', m.name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(path.join(dir, 'inputs'), { recursive: true });
  const feeds = {};
  const args = [file, '--threads', '1', '--iter', String(iter), '--warmup', '1', '--json',
                '--output-dir', path.join(dir, 'braid')];
  for (const spec of m.inputs) {
    const data = makeInput(spec);
    const npyFile = path.join(dir, 'inputs', `${spec.name.replace(/[^A-Za-z0-9_.-]/g, '_')}.npy`);
    writeNpy(npyFile, spec, data);
    feeds[spec.name] = new ort.Tensor(spec.dtype, data, spec.shape);
    args.push('--input', `${spec.name}=${npyFile}`);
  }

  const session = await ort.InferenceSession.create(file, {
    intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all', logSeverityLevel: 3 });
  const expected = await session.run(feeds);
  const ortTimes = [];
  for (let i = 0; i < iter; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    ortTimes.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  row.ort_ms = Number(median(ortTimes).toFixed(4));

  const run = spawnSync(path.join(build, 'tools', 'braid-run'), args,
                        { encoding: 'utf8', timeout: 600000 });
  if (run.status !== 0) {
    const lines = `${run.stderr || ''}`.split('\n').filter((l) => l.trim() !== '');
    row.result = 'fail';
    row.error = run.error ? run.error.message
                          : `braid-run exit ${run.status}: ${lines.slice(-1)[0] || '(no message)'}`;
    return row;
  }
  row.braid_ms = Number(JSON.parse(run.stdout).latency_ms.median.toFixed(4));
  // A model whose outputs move more than 1e-4 when its input moves by one ulp (a dynamically
  // quantized one: models.json says why) is held to what ONNX Runtime gives against itself
  // with one input element in ten moved by one ulp, with a margin of 2, per output, for the
  // largest and the mean difference.
  const noise = m.tolerance === 'ort_ulp_noise' ? await session.run(nudged(ort, feeds)) : null;
  if (noise) row.ort_ulp_noise_max_rel_diff = 0;
  row.max_rel_diff = 0;
  for (const name of session.outputNames) {
    const out = path.join(dir, 'braid', `${name.replace(/[/:]/g, '_')}.npy`);
    if (!fs.existsSync(out)) {
      row.result = 'fail';
      row.error = `braid gave no output "${name}"`;
      return row;
    }
    const c = compare(readNpy(out), expected[name]);
    if (c.error) {
      row.result = 'mismatch';
      row.error = `output "${name}": ${c.error}`;
      return row;
    }
    row.max_rel_diff = Math.max(row.max_rel_diff, c.rel);
    let bound = { rel: 1e-4, mean_rel: Infinity };
    if (noise) {
      const self = compare({ data: noise[name].data, shape: noise[name].dims }, expected[name]);
      row.ort_ulp_noise_max_rel_diff = Math.max(row.ort_ulp_noise_max_rel_diff, self.rel);
      bound = { rel: 2 * self.rel, mean_rel: 2 * self.mean_rel };
    }
    if (c.rel > bound.rel || c.mean_rel > bound.mean_rel) {
      row.result = 'mismatch';
      row.error = `output "${name}": largest relative difference ${c.rel.toPrecision(3)} ` +
                  `(bound ${bound.rel.toPrecision(3)}), mean ${c.mean_rel.toPrecision(3)} ` +
                  `(bound ${bound.mean_rel.toPrecision(3)})`;
    }
  }
  row.max_rel_diff = Number(row.max_rel_diff.toPrecision(3));
  if (noise) row.ort_ulp_noise_max_rel_diff = Number(row.ort_ulp_noise_max_rel_diff.toPrecision(3));
  if (!row.result) row.result = 'pass';
  return row;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const build = path.resolve(args.build);
  const manifest = JSON.parse(fs.readFileSync(path.join(here, 'models.json'), 'utf8'));
  const work = path.join(build, 'models');
  fs.mkdirSync(work, { recursive: true });
  let ort;
  try {
    installOrt(work);
    ort = require(path.join(work, 'node_modules', 'onnxruntime-node'));
  } catch (e) {
    if (e instanceof Offline) {
      console.error(`model suite skipped: ${e.message}`);
      process.exit(SKIP);
    }
    throw e;
  }
  const rows = [];
  let bad = 0;
  for (const m of manifest.models) {
    if (args.only && !args.only.has(m.name)) continue;
    let row;
    try {
      row = await runModel(ort, m, work, build, args.iter);
    } catch (e) {
      if (e instanceof Offline) {
        console.error(`model suite skipped: ${e.message}`);
        process.exit(SKIP);
      }
      row = { model: m.name, package: `${m.package}@${m.version}`, expect: m.expect,
              result: 'fail', error: e.message.split('\n')[0] };
    }
    const ok = row.result === 'pass';
    let verdict = ok ? 'ok' : `expected failure (${m.tracking})`;
    if (m.expect === 'pass' && !ok) {
      verdict = 'FAILED';
      ++bad;
    } else if (m.expect !== 'pass' && ok) {
      verdict = 'NOW PASSES: set its "expect" to "pass" in tests/models/models.json';
      ++bad;
    }
    row.verdict = verdict;
    rows.push(row);
    const noiseNote = row.ort_ulp_noise_max_rel_diff !== undefined
    ? ` (ONNX Runtime against itself, input moved by one ulp: ${row.ort_ulp_noise_max_rel_diff})` : '';
  const detail = row.error ? ` ${row.error}` : ` max rel diff ${row.max_rel_diff}${noiseNote}`;
    const times = row.braid_ms !== undefined ? `, braid ${row.braid_ms} ms, ORT ${row.ort_ms} ms` : '';
    console.log(`${m.name} (${row.package}): ${row.result}${detail}${times} -> ${verdict}`);
  }
  fs.writeFileSync(path.join(build, 'model_suite.json'),
                   JSON.stringify({ ort_version: ort.env.versions.common, threads: 1, models: rows },
                                  null, 1) + '\n');
  const passed = rows.filter((r) => r.result === 'pass').length;
  console.log(`${passed} of ${rows.length} models run and match ONNX Runtime; ` +
              `${bad} not as expected; written ${path.join(build, 'model_suite.json')}`);
  process.exit(bad ? 1 : 0);
}

main().catch((e) => {
  console.error(`model suite: ${e.stack || e.message}`);
  process.exit(1);
});
