// Where the time of one ONNX model goes, per ONNX op type, in braid and in ONNX Runtime on the
// same input: braid-run's per-operator profile (each braid operator names the ONNX node it came
// from) and ONNX Runtime's own per-node profile (enableProfiling), summed per op type per
// iteration, side by side.
//
//   node op_profile.js BUILD_DIR MODEL.onnx NAME=FILE.npy... [--threads N] [--iter N] [--json]
//                      [--nodes N]
//
// --nodes N also lists the N nodes where braid spends the most time over ONNX Runtime (by ONNX
// node name; a node ONNX Runtime fused away counts as 0 there).
// ONNX Runtime (onnxruntime-node) is taken from BUILD_DIR/models/node_modules (the real-model
// suite installs it there) or from this folder's node_modules (bench/vs_ort/run.sh). ONNX
// Runtime fuses nodes (a Conv with its activation, say): its time is counted under the op type
// of the node it kept, so compare the totals and the large rows, not every row. braid's time
// not from an ONNX node (the Input, the copies the planner adds) is "(braid)".
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { readNpy } = require('./npy');

function loadOrt(build) {
  for (const dir of [path.join(build, 'models', 'node_modules'), path.join(__dirname, 'node_modules')]) {
    const p = path.join(dir, 'onnxruntime-node');
    if (fs.existsSync(p)) return require(p);
  }
  throw new Error('onnxruntime-node not found: run tests/models/run.sh BUILD_DIR or bench/vs_ort/run.sh first');
}

function parseArgs(argv) {
  const a = { inputs: [], threads: 1, iter: 20, json: false, nodes: 0 };
  [a.build, a.model] = argv.slice(0, 2);
  for (let i = 2; i < argv.length; ++i) {
    if (argv[i] === '--threads') a.threads = Number(argv[++i]);
    else if (argv[i] === '--iter') a.iter = Number(argv[++i]);
    else if (argv[i] === '--json') a.json = true;
    else if (argv[i] === '--nodes') a.nodes = Number(argv[++i]);
    else a.inputs.push(argv[i].replace(/=(.*)$/, (_, f) => '=' + path.resolve(f)));
  }
  if (!a.build || !a.model) {
    console.error('usage: node op_profile.js BUILD_DIR MODEL.onnx NAME=FILE.npy... [--threads N] [--iter N] [--json]');
    process.exit(2);
  }
  a.model = path.resolve(a.model);
  return a;
}

//! The real-model suite names its input files after the inputs with other characters than
//! [A-Za-z0-9_.-] replaced by '_' ("onnx::Flatten_0" -> "onnx__Flatten_0"): back to the names.
async function resolveInputNames(ort, a) {
  const session = await ort.InferenceSession.create(a.model, { logSeverityLevel: 3 });
  const safe = (n) => n.replace(/[^A-Za-z0-9_.-]/g, '_');
  a.inputs = a.inputs.map((spec) => {
    const [name, file] = spec.split('=');
    const real = session.inputNames.includes(name) ? name
                                                   : session.inputNames.find((n) => safe(n) === name);
    return `${real || name}=${file}`;
  });
  await session.release();
}

//! ONNX Runtime's per-node kernel time, summed per op type per iteration (ms), and the median
//! run time.
async function ortProfile(ort, a, work) {
  const options = { intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential',
                    graphOptimizationLevel: 'all', logSeverityLevel: 3 };
  const plain = await ort.InferenceSession.create(a.model, options);
  const feeds = {};
  for (const spec of a.inputs) {
    const [name, file] = spec.split('=');
    const v = readNpy(file);
    feeds[name] = new ort.Tensor(v.dtype, v.data, v.shape);
  }
  for (let i = 0; i < 3; ++i) await plain.run(feeds);
  const times = [];
  for (let i = 0; i < a.iter; ++i) {
    const t0 = process.hrtime.bigint();
    await plain.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const cwd = process.cwd();
  process.chdir(work); // the profile file is written to the working directory
  try {
    const session = await ort.InferenceSession.create(a.model, {
      ...options, enableProfiling: true, profileFilePrefix: 'ort_profile' });
    for (let i = 0; i < a.iter; ++i) await session.run(feeds);
    session.endProfiling();
  } finally {
    process.chdir(cwd);
  }
  const file = fs.readdirSync(work).find((f) => f.startsWith('ort_profile') && f.endsWith('.json'));
  const events = JSON.parse(fs.readFileSync(path.join(work, file), 'utf8'));
  const perType = {}, perNode = {};
  for (const e of events) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
    const type = (e.args && e.args.op_name) || '?';
    const node = e.name.slice(0, -'_kernel_time'.length);
    perType[type] = (perType[type] || 0) + e.dur / 1000 / a.iter;
    perNode[node] = (perNode[node] || 0) + e.dur / 1000 / a.iter;
  }
  return { perType, perNode, median: median(times) };
}

//! braid-run's per-operator profile, summed per ONNX op type per iteration (ms), and its median.
function braidProfile(a, work) {
  const trace = path.join(work, 'braid_profile.json');
  // The latency from a run without the profile (its per-operator timestamps cost time too).
  const braidRun = (extra) => {
    const args = [a.model, '--threads', String(a.threads), '--iter', String(a.iter), '--warmup',
                  '3', '--json', ...extra];
    for (const spec of a.inputs) args.push('--input', spec);
    const run = spawnSync(path.join(a.build, 'tools', 'braid-run'), args, { encoding: 'utf8' });
    if (run.status !== 0) throw new Error(`braid-run failed: ${run.stderr || run.stdout}`);
    return JSON.parse(run.stdout);
  };
  const report = braidRun([]);
  braidRun(['--profile', trace]);
  const events = JSON.parse(fs.readFileSync(trace, 'utf8'));
  const list = Array.isArray(events) ? events : events.traceEvents;
  const perType = {}, perNode = {}, typeOf = {};
  for (const e of list) {
    if (e.ph !== 'X' || e.cat === 'iteration') continue;
    const m = e.name.match(/ONNX node "([^"]*)" \(([A-Za-z0-9_.]+), opset/);
    const type = m ? m[2] : '(braid)';
    perType[type] = (perType[type] || 0) + e.dur / 1000 / a.iter;
    if (m) {
      perNode[m[1]] = (perNode[m[1]] || 0) + e.dur / 1000 / a.iter;
      typeOf[m[1]] = `${type}: ${e.name.split(' "')[0]}`;
    }
  }
  return { perType, perNode, typeOf, median: report.latency_ms.median, isa: report.kernel_isa };
}

function median(v) {
  const s = [...v].sort((x, y) => x - y);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const ort = loadOrt(a.build);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'braid_op_profile_'));
  try {
    // braid first: ONNX Runtime's workers keep spinning for a while after its sessions run,
    // and would take a core from braid-run at 2 threads. The input names are ONNX Runtime's
    // to resolve, so a session is opened (and released) before.
    await resolveInputNames(ort, a);
    const b = braidProfile(a, work);
    const o = await ortProfile(ort, a, work);
    const types = [...new Set([...Object.keys(o.perType), ...Object.keys(b.perType)])]
      .sort((x, y) => (b.perType[y] || 0) + (o.perType[y] || 0) - (b.perType[x] || 0) - (o.perType[x] || 0));
    const sum = (t) => Object.values(t).reduce((x, y) => x + y, 0);
    const cpu = os.cpus()[0].model;
    if (a.json) {
      console.log(JSON.stringify({ model: a.model, cpu, isa: b.isa, threads: a.threads, ort_version: ort.env.versions.common,
                                   braid_median_ms: b.median, ort_median_ms: o.median,
                                   braid_ms: b.perType, ort_ms: o.perType }));
      return;
    }
    console.log(`${path.basename(a.model)} on ${cpu} (braid's kernels: ${b.isa}), ${a.threads} thread(s), ${a.iter} iterations; ` +
                `ONNX Runtime ${ort.env.versions.common}`);
    console.log(`run time, median: braid ${b.median.toFixed(3)} ms, ONNX Runtime ${o.median.toFixed(3)} ms ` +
                `(ratio ${(b.median / o.median).toFixed(2)})`);
    console.log(`${'op type'.padEnd(28)} ${'braid ms'.padStart(10)} ${'ORT ms'.padStart(10)}`);
    for (const t of types)
      console.log(`${t.padEnd(28)} ${(b.perType[t] || 0).toFixed(3).padStart(10)} ${(o.perType[t] || 0).toFixed(3).padStart(10)}`);
    console.log(`${'sum of operators'.padEnd(28)} ${sum(b.perType).toFixed(3).padStart(10)} ${sum(o.perType).toFixed(3).padStart(10)}`);
    if (a.nodes > 0) {
      const nodes = Object.keys(b.perNode)
        .sort((x, y) => (b.perNode[y] - (o.perNode[y] || 0)) - (b.perNode[x] - (o.perNode[x] || 0)))
        .slice(0, a.nodes);
      console.log(`\nnodes where braid spends the most over ONNX Runtime (ms per iteration):`);
      for (const n of nodes)
        console.log(`${b.perNode[n].toFixed(3).padStart(8)} ${(o.perNode[n] || 0).toFixed(3).padStart(8)}  ${n}  ${b.typeOf[n].slice(0, 120)}`);
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`op_profile: ${e.message}`);
  process.exit(1);
});
