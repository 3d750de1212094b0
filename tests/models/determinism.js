// Deterministic mode on the real-model suite (docs/determinism.md): each model of
// tests/models/models.json whose batch can grow is run by braid-run --deterministic on batches
// of 1, 3, 7 and 64 rows, at 1 and 2 kernel threads, on cpu0 and cpu:default. Every row of every
// output must have the same bits as the same row run alone at 1 thread on cpu0: no tolerance.
//
//   node determinism.js BUILD_DIR [--only NAME[,NAME...]] [--batches 1,3,7,64]
//
// A batch of N holds three distinct rows (the manifest's recipe with three seeds) in turn, so
// the rows alone are three runs per setting. An input's batch axis is where its declared shape
// names the first input's batch dimension, or the manifest's `batch_axes` (for models whose
// dimensions have no names); inputs without one (a sample rate) are fed as they are. A model
// whose batch is fixed by its file is checked on one input across the threads and comp nodes
// only, and says so. Exit status: 0 when
// every row matches, 1 otherwise, 77 when the models cannot be fetched.
'use strict';
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { SKIP, Offline, fetchModel, DTYPES, makeInput, writeNpy, readNpy } = require('./suite_lib');

const here = __dirname;
const DISTINCT_ROWS = 3;
const SETTINGS = [
  { threads: 1, device: 'cpu0' }, { threads: 2, device: 'cpu0' },
  { threads: 1, device: 'cpu:default' }, { threads: 2, device: 'cpu:default' },
];

function parseArgs(argv) {
  const args = { build: null, only: null, batches: [1, 3, 7, 64] };
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--only') args.only = new Set(argv[++i].split(','));
    else if (argv[i] === '--batches') args.batches = argv[++i].split(',').map(Number);
    else if (!args.build) args.build = argv[i];
    else throw new Error(`unexpected argument "${argv[i]}"`);
  }
  if (!args.build) throw new Error('usage: node determinism.js BUILD_DIR [--only NAMES] [--batches 1,3,7,64]');
  if (!args.batches.every((b) => Number.isInteger(b) && b >= 1))
    throw new Error('--batches takes whole numbers of at least 1');
  return args;
}

// Each input's batch axis (-1: fed whole to every batch), and why the model has none if so.
function batchAxes(m) {
  if (m.batch_axes) return { axes: m.inputs.map((s) => (s.name in m.batch_axes ? m.batch_axes[s.name] : -1)) };
  const name = m.inputs[0].declared[0];
  if (typeof name !== 'string')
    return { fixed: `batch fixed at ${JSON.stringify(name)} by the file`, axes: m.inputs.map(() => -1) };
  return { axes: m.inputs.map((s) => s.declared.indexOf(name)) };
}

// The shape's size before axis `a`, and the bytes of one step of axis `a`.
function split(shape, a, itemBytes) {
  const outer = shape.slice(0, a).reduce((x, y) => x * y, 1);
  return { outer, inner: shape.slice(a + 1).reduce((x, y) => x * y, 1) * itemBytes };
}

// `rows` (each a Buffer of one row's input, batch 1 on `axis`) stacked along `axis`.
function stack(rows, shape, axis, itemBytes) {
  const { outer, inner } = split(shape, axis, itemBytes);
  const out = Buffer.alloc(outer * rows.length * inner);
  for (let o = 0; o < outer; ++o)
    rows.forEach((r, i) => r.copy(out, (o * rows.length + i) * inner, o * inner, (o + 1) * inner));
  return out;
}

function bytesOf(a) {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

// Runs braid-run once; returns { name: {shape, bytes} } per output.
function runBraid(build, file, dir, feeds, setting) {
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  const args = [file, '--deterministic', '--iter', '1', '--warmup', '0', '--threads',
                String(setting.threads), '--comp-node', setting.device, '--output-dir', path.join(dir, 'out')];
  for (const f of feeds) {
    const npy = path.join(dir, `${f.spec.name.replace(/[^A-Za-z0-9_.-]/g, '_')}.npy`);
    const dtype = DTYPES[f.spec.dtype];
    const data = new dtype.array(f.bytes.buffer.slice(f.bytes.byteOffset, f.bytes.byteOffset + f.bytes.length));
    writeNpy(npy, { ...f.spec, shape: f.shape }, data);
    args.push('--input', `${f.spec.name}=${npy}`);
  }
  const run = spawnSync(path.join(build, 'tools', 'braid-run'), args, { encoding: 'utf8', timeout: 600000 });
  if (run.status !== 0) {
    const lines = `${run.stderr || ''}`.split('\n').filter((l) => l.trim() !== '');
    throw new Error(run.error ? run.error.message : `braid-run exit ${run.status}: ${lines.slice(-1)[0]}`);
  }
  const outs = {};
  for (const f of fs.readdirSync(path.join(dir, 'out'))) {
    const { data, shape } = readNpy(path.join(dir, 'out', f));
    outs[f.replace(/\.npy$/, '')] = { shape, bytes: bytesOf(data), item: data.BYTES_PER_ELEMENT };
  }
  return outs;
}

// Where a single row's output `one` grows into the batch of `n` rows' output `many`.
function outputAxis(one, many, n) {
  if (one.shape.length !== many.shape.length) return -1;
  for (let a = 0; a < one.shape.length; ++a) {
    if (one.shape[a] === 1 && many.shape[a] === n &&
        one.shape.every((d, i) => i === a || d === many.shape[i]))
      return a;
  }
  return -1;
}

function checkModel(m, work, build, allBatches) {
  // A model whose batch is fixed is checked on one input, across the settings only.
  const { axes, fixed } = batchAxes(m);
  const batches = fixed ? [1] : allBatches;
  const file = fetchModel(m, work);
  const dir = path.join(work, 'determinism', m.name);
  // Row r's value of each input (batch 1 on its axis), from the recipe with a seed per row.
  const rowInputs = [];
  for (let r = 0; r < (fixed ? 1 : DISTINCT_ROWS); ++r) {
    rowInputs.push(m.inputs.map((spec, k) => {
      const shape = [...spec.shape];
      if (axes[k] >= 0) shape[axes[k]] = 1;
      const fill = { ...spec.fill, seed: (spec.fill.seed || 0) + 7919 * r };
      return { spec, shape, bytes: bytesOf(makeInput({ ...spec, shape, fill })) };
    }));
  }
  const feedsOf = (n) => m.inputs.map((spec, k) => {
    if (axes[k] < 0) return rowInputs[0][k];
    const shape = [...rowInputs[0][k].shape];
    shape[axes[k]] = n;
    const rows = Array.from({ length: n }, (_, i) => rowInputs[i % DISTINCT_ROWS][k].bytes);
    return { spec, shape, bytes: stack(rows, shape, axes[k], DTYPES[spec.dtype].array.BYTES_PER_ELEMENT) };
  });

  // The reference: each row alone, 1 thread, cpu0.
  const reference = rowInputs.map((feeds, r) => runBraid(build, file, path.join(dir, `row${r}`), feeds, SETTINGS[0]));
  let checkedRows = 0;
  for (const setting of SETTINGS) {
    for (const n of batches) {
      if (n === 1 && setting === SETTINGS[0]) continue; // the reference itself
      const where = `batch ${n}, ${setting.threads} thread(s), ${setting.device}`;
      const rowsHere = n === 1 ? reference.map((_, r) => r) : [null];
      for (const r of rowsHere) {
        const feeds = n === 1 ? rowInputs[r] : feedsOf(n);
        const outs = runBraid(build, file, path.join(dir, 'batch'), feeds, setting);
        for (const [name, want0] of Object.entries(reference[0])) {
          const got = outs[name];
          if (!got) return { result: 'mismatch', why: `${where}: braid gave no output "${name}"` };
          const a = n === 1 ? 0 : outputAxis(want0, got, n);
          if (a < 0) {
            return { result: 'mismatch', why: `${where}: output "${name}" has shape ` +
                     `${JSON.stringify(got.shape)}, one row's is ${JSON.stringify(want0.shape)}` };
          }
          const { outer, inner } = split(got.shape, a, got.item);
          const rowsOut = n === 1 ? 1 : n;
          for (let i = 0; i < rowsOut; ++i) {
            const want = reference[n === 1 ? r : i % DISTINCT_ROWS][name].bytes;
            for (let o = 0; o < outer; ++o) {
              const gotRow = got.bytes.subarray((o * rowsOut + i) * inner, (o * rowsOut + i + 1) * inner);
              const wantRow = want.subarray(o * inner, (o + 1) * inner);
              if (!gotRow.equals(wantRow)) {
                let b = 0;
                while (gotRow[b] === wantRow[b]) ++b;
                const e = Math.floor(b / got.item);
                return { result: 'mismatch', why: `${where}: output "${name}" row ${i}: element ${e} of ` +
                         `the row differs from the row run alone (1 thread, cpu0) in its bits` };
              }
            }
            ++checkedRows;
          }
        }
      }
    }
  }
  fs.rmSync(dir, { recursive: true, force: true });
  return { result: 'pass', rows: checkedRows, note: fixed };
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const build = path.resolve(args.build);
  const manifest = JSON.parse(fs.readFileSync(path.join(here, 'models.json'), 'utf8'));
  const work = path.join(build, 'models');
  fs.mkdirSync(work, { recursive: true });
  let bad = 0, passed = 0;
  for (const m of manifest.models) {
    if (args.only && !args.only.has(m.name)) continue;
    if (m.expect !== 'pass') continue;
    const t0 = Date.now();
    let row;
    try {
      row = checkModel(m, work, build, args.batches);
    } catch (e) {
      if (e instanceof Offline) {
        console.error(`determinism check skipped: ${e.message}`);
        process.exit(SKIP);
      }
      row = { result: 'fail', why: e.message.split('\n')[0] };
    }
    const secs = ((Date.now() - t0) / 1000).toFixed(1);
    if (row.result === 'pass') ++passed;
    if (row.result === 'mismatch' || row.result === 'fail') ++bad;
    const detail = row.result === 'pass'
      ? `${row.rows} output rows bitwise equal${row.note ? ` (${row.note}: threads and comp nodes only)` : ''}`
      : row.why;
    console.log(`${m.name}: ${row.result}: ${detail} (${secs} s)`);
  }
  console.log(`${passed} models give the same bits row by row at batches ${args.batches.join(', ')}, ` +
              `1 and 2 threads, cpu0 and cpu:default; ${bad} do not`);
  process.exit(bad ? 1 : 0);
}

main();
