//! The adversary's lab: the two users, the seed's fake GPU, and a real `carma serve` with its
//! clients. What the moves and the invariants stand on; no move and no judgement here.
//!
//! **Users.** Jobs run as their submitter, so a move that runs a job needs users with passwd
//! entries. [`Users::make`] makes two throw-away system users (`useradd`, removed with
//! `userdel` when dropped); where that fails the bench falls back to the bare uids 40001 and
//! 40002, whose files root can still give away, and plays no job ([`Users::jobs`] is false).
//!
//! **The GPU.** One fake GPU per seed (`gpus.json` in the seed's folder, `src/gpu/fake`), so
//! every job shares it. The harness rewrites its process list to make a job use more GPU
//! memory than it declared ([`write_gpu`]).
//!
//! **The dashboard.** A real `carma serve` on 127.0.0.1 with an ephemeral port, one per seed
//! ([`Dashboard::start`]); an honest client GETs `/` with a deadline ([`honest_get`]), a hostile
//! one pipelines requests and never reads ([`pipeline`]).

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The bare uids played when no user can be made: files only, no job.
const ALICE_BARE: u32 = 40_001;
const MALLORY_BARE: u32 = 40_002;
/// The seed's one GPU, MiB.
const GPU_MIB: u64 = 40_960;

/// Alice (honest) and mallory (hostile).
#[derive(Debug, Clone, Copy)]
pub(super) struct Players {
    /// Alice's uid.
    pub(super) alice: u32,
    /// Mallory's uid.
    pub(super) mallory: u32,
    /// Whether they are real users whose jobs can run.
    pub(super) jobs: bool,
}

/// The players, and the users made for them (removed when dropped).
pub(super) struct Users {
    /// Who plays.
    pub(super) players: Players,
    made: Vec<String>,
}

impl Users {
    /// Two throw-away users, or the bare uids where `useradd` fails.
    pub(super) fn make() -> Users {
        let pid = std::process::id();
        let names = [format!("carma-adv-a-{pid}"), format!("carma-adv-m-{pid}")];
        let mut made = Vec::new();
        let mut uids = Vec::new();
        for name in &names {
            let added = Command::new("useradd")
                .args(["--system", "--no-create-home", "--user-group", "--shell", "/bin/sh", name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !added {
                break;
            }
            made.push(name.clone());
            match crate::access::users::uid_of(name) {
                Some(uid) => uids.push(uid),
                None => break,
            }
        }
        match uids[..] {
            [alice, mallory] => Users { players: Players { alice, mallory, jobs: true }, made },
            _ => Users { players: Players { alice: ALICE_BARE, mallory: MALLORY_BARE, jobs: false }, made },
        }
    }
}

impl Drop for Users {
    /// Removes the users made; `userdel` refuses a user with a live process (exit 8), such as
    /// a suspended job's frozen worker that its supervisor kills only after its grace, so it
    /// is asked again for up to [`USERDEL_PATIENCE`].
    fn drop(&mut self) {
        let deadline = Instant::now() + USERDEL_PATIENCE;
        for name in &self.made {
            while Command::new("userdel")
                .arg(name)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.code() == Some(8))
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

/// How long [`Users`]' drop waits for the last processes of its users to end.
const USERDEL_PATIENCE: Duration = Duration::from_secs(20);

/// A stand-in for NVIDIA's `cuda-checkpoint` for the suspend seeds, as `tests/preemption.rs`
/// has one: `--get-state --pid P` prints the pid's CUDA state (`running` until toggled),
/// `--toggle --pid P` flips it. It lives in a folder of root's under `/run` that no one else
/// may write, as the tick's trust check asks of the tool and every folder above it; removed
/// when dropped.
pub(super) struct CheckpointTool {
    dir: std::path::PathBuf,
    /// The tool's path.
    pub(super) path: std::path::PathBuf,
}

impl CheckpointTool {
    /// Writes the stand-in (root's, 0755) and its state folder.
    pub(super) fn install() -> Result<CheckpointTool> {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::path::PathBuf::from(format!("/run/carma-adversary-{}", std::process::id()));
        let fail = |e: std::io::Error| Error::io(format!("adversary bench: {}", dir.display()), e);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).map_err(fail)?;
        for folder in [dir.clone(), dir.join("state")] {
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
        }
        let path = dir.join("cuda-checkpoint");
        let script = STAND_IN.replace("DIR", &dir.join("state").to_string_lossy());
        crate::exec::write_file_atomic(&path, script.as_bytes(), 0o755)
            .map_err(|e| Error::BadInput(format!("adversary bench: cannot write {}: {e}", path.display())))?;
        Ok(CheckpointTool { dir, path })
    }
}

impl Drop for CheckpointTool {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The stand-in's text; `DIR` is its state folder.
const STAND_IN: &str = r#"#!/bin/sh
state=DIR/state-$3
case "$1" in
  --get-state) if [ -f "$state" ]; then cat "$state"; else echo running; fi ;;
  --toggle) if [ "$(cat "$state" 2>/dev/null)" = checkpointed ]; then echo running > "$state"; else echo checkpointed > "$state"; fi ;;
  *) echo "unknown option $1" >&2; exit 1 ;;
esac
"#;

/// `[sched.preemption] suspend-max` of the seeds' queues, ms: short enough to end within a
/// seed.
pub(super) const SUSPEND_MAX_MS: u64 = 4000;

/// The fifth wave's queue for `seed`: time limits (`[limits] time-limit-max` 60 s in every
/// seed; `time-limit-default` 2 s in odd seeds, so that asking for nothing gets the default
/// there and the maximum in even ones), and preemption on (`requeue` mode in seeds whose half
/// is odd, `suspend` with the stand-in tool in the others) with no `min-run`, a 3 s grace,
/// `max-per-task` 1 (a second notice to one task is already one too many) and a
/// [`SUSPEND_MAX_MS`] `suspend-max`.
pub(super) fn fifth_wave_config(config: &mut crate::config::Config, seed: u64, tool: &CheckpointTool) {
    use crate::sched::PreemptionMode;
    config.limits.time_limit_max_ms = Some(60_000);
    config.limits.time_limit_default_ms = (seed % 2 == 1).then_some(2000);
    let preemption = &mut config.sched.preemption;
    preemption.mode = if (seed / 2) % 2 == 1 { PreemptionMode::Requeue } else { PreemptionMode::Suspend };
    preemption.grace_ms = 3000;
    preemption.min_run_ms = 0;
    preemption.max_per_task = 1;
    preemption.head_wait_ms = 3_600_000;
    preemption.suspend_max_ms = SUSPEND_MAX_MS;
    preemption.cuda_checkpoint = Some(tool.path.clone());
}

/// One process on the fake GPU: pid and MiB.
pub(super) type GpuProcess = (u32, u64);

/// Writes the seed's fake GPU file: one A100-40GB with these processes, its used memory their
/// sum (atomically: the tick must never read half a file).
pub(super) fn write_gpu(path: &Path, processes: &[GpuProcess]) -> Result<()> {
    let used: u64 = processes.iter().map(|(_, mib)| mib).sum();
    let list: Vec<serde_json::Value> =
        processes.iter().map(|(pid, mib)| serde_json::json!({"pid": pid, "used_mib": mib})).collect();
    let gpus = serde_json::json!([{
        "uuid": "GPU-adversary-0000",
        "name": "A100-SXM4-40GB",
        "memory_total_mib": GPU_MIB,
        "memory_used_mib": used.min(GPU_MIB),
        "sm_active": 0.0,
        "processes": list,
    }]);
    crate::exec::write_file_atomic(path, gpus.to_string().as_bytes(), 0o644)
        .map_err(|e| Error::BadInput(format!("adversary bench: cannot write {}: {e}", path.display())))
}

/// A `carma serve` child on an ephemeral loopback port, killed when dropped.
pub(super) struct Dashboard {
    child: Child,
    /// Where it listens.
    pub(super) address: SocketAddr,
}

impl Dashboard {
    /// Starts `carma serve --listen 127.0.0.1:0` on `home`; `None` when this process is not
    /// carma (a unit test) or the server does not say where it listens within 10 s (the
    /// bench counts the seeds that had one).
    pub(super) fn start(home: &Path) -> Option<Dashboard> {
        let exe = std::env::current_exe().ok()?;
        if exe.file_name().is_none_or(|n| n != "carma") {
            return None;
        }
        let mut child = Command::new(exe)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("CARMA_HOME", home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let stdout = child.stdout.take()?;
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = send.send(line);
        });
        let line = receive.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        let address = line.split("http://").nth(1).and_then(|rest| rest.split('/').next()?.parse().ok());
        match address {
            Some(address) => Some(Dashboard { child, address }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An honest `GET /`: `Ok` with the status line when the whole answer's first line came
/// within `bound`, else why not.
pub(super) fn honest_get(address: SocketAddr, bound: Duration) -> std::result::Result<String, String> {
    let started = Instant::now();
    let left = || bound.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
    let mut stream = TcpStream::connect_timeout(&address, bound).map_err(|e| format!("connect: {e}"))?;
    stream.set_write_timeout(Some(left())).map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.contains(&b'\n') {
        stream.set_read_timeout(Some(left())).map_err(|e| e.to_string())?;
        match stream.read(&mut chunk) {
            Ok(0) => return Err("closed before answering".into()),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("no answer after {} ms ({e})", started.elapsed().as_millis())),
        }
        if started.elapsed() > bound {
            return Err(format!("no answer within {} ms", bound.as_millis()));
        }
    }
    let line = String::from_utf8_lossy(&got);
    Ok(line.lines().next().unwrap_or_default().to_string())
}

/// A hostile client: `requests` pipelined GETs of every page, written without reading an
/// answer (the write gives up after 500 ms), the connection kept open by the caller.
pub(super) fn pipeline(address: SocketAddr, requests: u64) -> Option<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_write_timeout(Some(Duration::from_millis(500))).ok()?;
    let mut burst = Vec::new();
    for n in 0..requests {
        let path = ["/", "/metrics", "/report", "/version"][(n % 4) as usize];
        burst.extend_from_slice(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes());
    }
    let _ = stream.write_all(&burst);
    Some(stream)
}

#[cfg(test)]
mod tests {
    //! Goal: the lab's fixtures are what the moves and invariants rely on. Method: the fake
    //! GPU file read back by the real probe; the honest client against a local listener that
    //! answers and one that never does.
    use super::*;
    use crate::gpu::GpuProbe;

    #[test]
    fn the_fake_gpu_lists_the_hogs_process_and_its_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("gpus.json");
        write_gpu(&path, &[(4242, 30_000), (4343, 900)]).expect("write");
        let samples = crate::gpu::FakeProbe::open(&path)
            .expect("the probe takes the file")
            .sample(&crate::gpu::SinceMarks::new())
            .expect("sample");
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].memory_used_mib, 30_900);
        let processes: Vec<(u32, u64)> =
            samples[0].processes.iter().map(|p| (p.pid, p.used_mib.unwrap_or(0))).collect();
        assert_eq!(processes, [(4242, 30_000), (4343, 900)]);
    }

    #[test]
    fn an_honest_get_waits_no_longer_than_its_bound() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let started = Instant::now();
        let got = honest_get(silent.local_addr().expect("addr"), Duration::from_millis(300));
        assert!(got.is_err(), "{got:?}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        let answering = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = answering.local_addr().expect("addr");
        let server = std::thread::spawn(move || {
            let (mut stream, _) = answering.accept().expect("accept");
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        });
        assert_eq!(honest_get(address, Duration::from_secs(5)).as_deref(), Ok("HTTP/1.1 200 OK"));
        server.join().expect("server");
    }
}
