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
const crypto = require('crypto');
const { execFileSync, spawnSync } = require('child_process');

const SKIP = 77;
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

// ---------------------------------------------------------------- setup
class Offline extends Error {}

function npm(args, cwd) {
  const r = spawnSync('npm', args, { cwd, encoding: 'utf8' });
  if (r.error) throw new Offline(`npm could not be started: ${r.error.message}`);
  if (r.status !== 0) {
    const text = `${r.stderr}${r.stdout}`;
    if (/ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|network/i.test(text))
      throw new Offline(`the npm registry is unreachable (npm ${args.join(' ')}: ` +
                        `${text.split('\n').find((l) => /ERR/.test(l)) || text.trim()})`);
    throw new Error(`npm ${args.join(' ')} failed (exit ${r.status}):\n${text}`);
  }
  return r.stdout;
}

function installOrt(work) {
  if (fs.existsSync(path.join(work, 'node_modules', 'onnxruntime-node'))) return;
  fs.copyFileSync(path.join(here, 'package.json'), path.join(work, 'package.json'));
  // The package ships its CPU build; its install script only fetches CUDA libraries.
  npm(['install', '--no-audit', '--no-fund', '--ignore-scripts', '--silent'], work);
}

function sha256(file) {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

// The model file of `m`, fetched and checked once.
function fetchModel(m, work) {
  const file = path.join(work, 'files', `${m.name}.onnx`);
  if (fs.existsSync(file) && sha256(file) === m.sha256) return file;
  const tarballs = path.join(work, 'tarballs');
  fs.mkdirSync(tarballs, { recursive: true });
  const spec = `${m.package}@${m.version}`;
  const tarball = path.join(tarballs,
                            `${m.package.replace(/^@/, '').replace('/', '-')}-${m.version}.tgz`);
  if (!fs.existsSync(tarball)) {
    const out = npm(['pack', spec, '--pack-destination', tarballs, '--silent'], work).trim();
    const made = path.join(tarballs, out.split('\n').pop());
    if (made !== tarball) fs.renameSync(made, tarball);
  }
  const tmp = fs.mkdtempSync(path.join(work, 'extract-'));
  try {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    if (m.path) {
      execFileSync('tar', ['xzf', tarball, '-C', tmp, m.path]);
      fs.renameSync(path.join(tmp, m.path), file);
    } else {
      // A model shipped in chunks named by their hash, listed with their offsets in a
      // resources index (m.resource: the index's path and the model's key in it).
      execFileSync('tar', ['xzf', tarball, '-C', tmp, m.resource.index]);
      const entry = JSON.parse(fs.readFileSync(path.join(tmp, m.resource.index)))[m.resource.key];
      const chunks = [...entry.chunks].sort((a, b) => a.offsets[0] - b.offsets[0]);
      const dir = path.dirname(m.resource.index);
      execFileSync('tar', ['xzf', tarball, '-C', tmp, ...chunks.map((c) => `${dir}/${c.hash}`)]);
      fs.writeFileSync(file, Buffer.concat(chunks.map((c) => fs.readFileSync(path.join(tmp, dir, c.hash)))));
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  const got = sha256(file);
  if (got !== m.sha256)
    throw new Error(`${m.name}: ${spec}:${m.path || m.resource.key} has sha256 ${got}, the manifest says ${m.sha256}`);
  return file;
}

// ---------------------------------------------------------------- inputs
const DTYPES = {
  float32: { array: Float32Array, descr: '<f4' },
  int64: { array: BigInt64Array, descr: '<i8' },
  int32: { array: Int32Array, descr: '<i4' },
  uint8: { array: Uint8Array, descr: '|u1' },
  bool: { array: Uint8Array, descr: '|b1' },
  float64: { array: Float64Array, descr: '<f8' },
};

// mulberry32: a small seeded generator, so every run feeds the same values.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Speech-like audio at 16 kHz: three harmonics of a pitch gliding between 140 and 220 Hz under
// a 4 Hz syllable envelope, with a little noise; `scale` 1 gives [-1, 1], 32767 the int16 range.
function speech(n, r, scale) {
  const out = new Float32Array(n);
  let phase = 0;
  for (let i = 0; i < n; ++i) {
    const t = i / 16000;
    phase += (2 * Math.PI * (180 + 40 * Math.sin(2 * Math.PI * 0.7 * t))) / 16000;
    const env = 0.5 + 0.5 * Math.abs(Math.sin(2 * Math.PI * 4 * t));
    const v = env * (0.5 * Math.sin(phase) + 0.25 * Math.sin(2 * phase) + 0.12 * Math.sin(3 * phase)) +
              0.02 * (2 * r() - 1);
    out[i] = v * 0.6 * scale;
  }
  return out;
}

// A grey page of NCHW shape (one plane, copied to every channel): light noisy paper with dark
// glyph-like strokes, in lines over the page, or one centred line `lineHeight` px high (a
// recognizer's crop).
function document(shape, r, lineHeight) {
  const [h, w] = shape.slice(-2);
  const g = new Float32Array(h * w);
  for (let i = 0; i < h * w; ++i) g[i] = 0.88 + 0.08 * r();
  const rect = (y0, x0, rh, rw, v) => {
    for (let y = Math.max(0, y0); y < Math.min(h, y0 + rh); ++y)
      for (let x = Math.max(0, x0); x < Math.min(w, x0 + rw); ++x) g[y * w + x] = v;
  };
  const line = (y0, lh, x0, x1) => {
    for (let x = x0; x < x1;) {
      const gw = Math.floor(lh * (0.45 + 0.3 * r()));
      if (r() < 0.15) { // a gap between words
        x += gw;
        continue;
      }
      const ink = 0.05 + 0.15 * r(), th = Math.max(1, Math.round(lh / 8));
      for (let k = 2 + Math.floor(3 * r()); k > 0; --k) {
        if (r() < 0.5)
          rect(y0 + Math.floor(r() * lh * 0.2), x + Math.floor(r() * (gw - th)),
               Math.floor(lh * (0.6 + 0.3 * r())), th, ink);
        else
          rect(y0 + Math.floor(r() * (lh - th)), x, th, gw, ink);
      }
      x += gw + Math.max(1, Math.round(lh / 6));
    }
  };
  if (lineHeight) {
    line(Math.floor((h - lineHeight) / 2), lineHeight, 4 + Math.floor(4 * r()), Math.floor(w * 0.9));
  } else {
    for (let y = 16; y + 24 < h; y += 34 + Math.floor(12 * r()))
      line(y, 14 + Math.floor(8 * r()), 12 + Math.floor(20 * r()), w - 12 - Math.floor(60 * r()));
  }
  return (c, i) => g[i];
}

// A photo-like NCHW image: a vertical colour gradient behind a textured elliptical subject.
function photo(shape, r) {
  const [h, w] = shape.slice(-2);
  const top = [0.35, 0.55, 0.8], bottom = [0.8, 0.75, 0.6], subject = [0.7, 0.35, 0.25];
  return (c, i) => {
    const y = Math.floor(i / w), x = i % w;
    const dx = (x - w * 0.5) / (w * 0.22), dy = (y - h * 0.55) / (h * 0.35);
    const v = dx * dx + dy * dy < 1
      ? subject[c % 3] * (0.8 + 0.2 * Math.sin(x * 0.05) * Math.cos(y * 0.07))
      : top[c % 3] * (1 - y / h) + bottom[c % 3] * (y / h);
    return Math.min(1, Math.max(0, v + 0.04 * (r() - 0.5)));
  };
}

// The values of one input from its recipe (`fill`): a constant; uniform in [lo, hi); speech;
// or an image (`document`, `photo`: pixels in [0, 1], then (pixel - mean[c]) / std[c]).
function makeInput(spec) {
  const n = spec.shape.reduce((a, b) => a * b, 1);
  const { array } = DTYPES[spec.dtype] || {};
  if (!array) throw new Error(`input ${spec.name}: dtype ${spec.dtype} is not supported here`);
  const data = new array(n);
  const fill = spec.fill;
  const cast = spec.dtype === 'int64' ? (v) => BigInt(Math.round(v)) : (v) => v;
  const r = rng(fill.seed || 0);
  if (fill.kind === 'const') {
    data.fill(cast(fill.value));
  } else if (fill.kind === 'uniform') {
    for (let i = 0; i < n; ++i) data[i] = cast(fill.lo + (fill.hi - fill.lo) * r());
  } else if (fill.kind === 'speech') {
    data.set(speech(n, r, fill.scale));
  } else if (fill.kind === 'document' || fill.kind === 'photo') {
    const [b, c, h, w] = spec.shape;
    const pixel = fill.kind === 'document' ? document(spec.shape, r, fill.line_height)
                                           : photo(spec.shape, r);
    for (let k = 0; k < b * c * h * w; ++k) {
      const ch = Math.floor(k / (h * w)) % c;
      data[k] = (pixel(ch, k % (h * w)) - fill.mean[ch]) / fill.std[ch];
    }
  } else {
    throw new Error(`input ${spec.name}: unknown fill "${fill.kind}"`);
  }
  return data;
}

function writeNpy(file, spec, data) {
  const shape = spec.shape.length === 1 ? `(${spec.shape[0]},)` : `(${spec.shape.join(', ')})`;
  let header = `{'descr': '${DTYPES[spec.dtype].descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'),
                                        Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

function readNpy(file) {
  const buf = fs.readFileSync(file);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + headerLen;
  const header = buf.toString('latin1', major === 1 ? 10 : 12, start);
  const descr = header.match(/'descr': '([^']*)'/)[1];
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((s) => s.trim() !== '')
    .map((s) => Number(s.trim()));
  const body = buf.buffer.slice(buf.byteOffset + start, buf.byteOffset + buf.length);
  const kinds = { '<f4': Float32Array, '<f8': Float64Array, '<i4': Int32Array, '<i8': BigInt64Array,
                  '|u1': Uint8Array, '|b1': Uint8Array, '|i1': Int8Array, '<f2': Uint16Array };
  if (!kinds[descr]) throw new Error(`${file}: dtype ${descr} is not read here`);
  return { data: new kinds[descr](body), shape, descr };
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
