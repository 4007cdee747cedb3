// `sluice serve` as a child process for the Node tests (the console's and
// the OpenAI SDK's): started on a free port, stopped by closing its stdin.
import { spawn } from 'node:child_process';

// Starts `binary serve` with `args`; resolves with { proc, url } once it
// prints READY (60 s at most), rejects with its output so far otherwise.
export function startServe(binary, args) {
  const proc = spawn(binary, ['serve', '--http', '127.0.0.1:0', '--exit-on-stdin-eof', ...args],
    { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('sluice serve not ready in 60 s:\n' + out)), 60000);
    const onData = (d) => {
      out += d;
      const m = out.match(/READY serve (\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1] });
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', (d) => { out += d; });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error('sluice serve exited (' + code + '):\n' + out));
    });
  });
}

// Closes its stdin (--exit-on-stdin-eof) and waits for it to exit (killed
// after 20 s).
export async function stopServe(s) {
  if (!s) return;
  const exited = new Promise((r) => s.proc.once('exit', r));
  s.proc.stdin.end();
  const timer = setTimeout(() => s.proc.kill('SIGKILL'), 20000);
  await exited;
  clearTimeout(timer);
}
