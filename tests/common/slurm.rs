//! A real Slurm cluster on this machine, for tests: Debian's slurmctld, slurmd and munged,
//! started without systemd from a temporary directory, fake GPUs (character devices made
//! with mknod, and fake GPU files for carma), shards, carma's hooks and job_submit.lua.
//!
//! Two nodes when network namespaces work (each slurmd in its own namespace with its own
//! address and `-N name`, the controller on the host side of the first veth pair), else one
//! node on 127.0.0.1. Every daemon gets its own socket, ports, pid file, spool and log under
//! the temporary directory, so nothing collides with a Slurm already on the machine. Runs
//! from several checkouts are serialised by a lock file, and whatever a killed run left
//! behind (its daemons by pid, its namespaces) is removed by the next run before it starts.
//! Dropping the cluster cancels the jobs and stops every daemon, also when the test fails.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod meter;

use meter::{FakeGpus, GpuMeter, write_atomically};

/// Serialises the Slurm tests of every checkout on this machine.
const LOCK_PATH: &str = "/tmp/carma-slurm-test.lock";
/// Daemon pids and namespaces of the running test, for the next run to clean up after a kill.
const STATE_PATH: &str = "/tmp/carma-slurm-test.state";

/// Why the Slurm tests cannot run here, or `None` when they can.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (slurmd must run as root)".into());
    }
    let missing: Vec<&str> = ["slurmctld", "slurmd", "munged", "sbatch", "scontrol", "sinfo", "runuser"]
        .into_iter()
        .filter(|p| find_program(p).is_none())
        .collect();
    (!missing.is_empty()).then(|| format!("{} not installed", missing.join(", ")))
}

/// Where Slurm's daemons cannot run here, says "skipped: …" through the one skip helper (which
/// fails the test in CI, where `.ci/run` installs them) and returns true.
pub fn skip_without_slurm() -> bool {
    let Some(why) = unavailable() else { return false };
    super::skip::skip(
        super::skip::Need::Slurm,
        &format!(
            "it needs root and Debian's Slurm daemons ({why}); as root run \
             `apt-get install -y --no-install-recommends slurmctld slurmd munge`"
        ),
    );
    true
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin"])
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// One slurmd.
pub struct Node {
    pub name: String,
    /// The node's carma state directory (its journal).
    pub home: PathBuf,
    /// The network namespace slurmd runs in, if any.
    pub netns: Option<String>,
}

/// A running cluster; dropping it stops everything.
pub struct SlurmCluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    pub gpus_per_node: u32,
    pub gpu_mib: u64,
    pub shard_mib: u64,
    /// Why the cluster has one node, when two were asked for.
    pub single_node_reason: Option<String>,
    /// The carma binary, copied where every user can run it.
    pub carma: PathBuf,
    pids: Vec<u32>,
    /// The fake GPUs as hardware (see `meter`), from the start.
    meter: Option<GpuMeter>,
    _lock: File,
}

impl SlurmCluster {
    /// Starts a controller and `nodes` (1 or 2) nodes of `gpus_per_node` fake GPUs of
    /// `gpu_mib` each, split into shards of `shard_mib`.
    pub fn start(nodes: usize, gpus_per_node: u32, gpu_mib: u64, shard_mib: u64) -> SlurmCluster {
        let lock =
            File::options().create(true).truncate(false).write(true).open(LOCK_PATH).expect("lock file");
        lock.lock().expect("lock the Slurm test lock");
        clean_up_after_a_killed_run();
        let dir = tempfile::Builder::new().prefix("carma-slurm-").tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        remember(&format!("conf {}", dir.path().join("etc/slurm.conf").display()));
        let carma = dir.path().join("carma");
        super::copy_carma(&carma);
        let mut cluster = SlurmCluster {
            dir,
            nodes: Vec::new(),
            gpus_per_node,
            gpu_mib,
            shard_mib,
            single_node_reason: None,
            carma,
            pids: Vec::new(),
            meter: None,
            _lock: lock,
        };
        let addresses = cluster.network(nodes);
        cluster.start_munge();
        cluster.write_config(&addresses);
        cluster.meter = Some(cluster.start_meter());
        cluster.start_daemons();
        cluster
    }

    /// The nodes' fake GPUs: what jobs hold through `carma_gpu_hold` ([`Self::with_gpu_hold`])
    /// and what a test lists, kept current every 200 ms.
    pub fn meter(&self) -> &GpuMeter {
        self.meter.as_ref().expect("started with the cluster")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn conf(&self) -> PathBuf {
        self.path("etc/slurm.conf")
    }

    /// A Slurm client command against this cluster.
    pub fn slurm(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", self.conf()).stdin(Stdio::null());
        cmd
    }

    /// A command run as `user` (through runuser) against this cluster.
    pub fn as_user(&self, user: &str, program: &Path, args: &[&str]) -> Output {
        let mut cmd = self.slurm("runuser");
        cmd.args(["-u", user, "--"]).arg(program).args(args).current_dir(self.path("work"));
        cmd.output().expect("runuser")
    }

    /// carma against `node`'s state directory.
    pub fn carma_on(&self, node: &Node, args: &[&str]) -> Output {
        let mut cmd = self.slurm(self.carma.to_str().unwrap());
        cmd.env("CARMA_HOME", &node.home).args(args);
        cmd.output().expect("carma")
    }

    /// Addresses of the controller and each node: two network namespaces when they work.
    fn network(&mut self, nodes: usize) -> (String, Vec<String>) {
        if nodes > 1 {
            match self.namespaces(nodes) {
                Ok(addresses) => return addresses,
                Err(why) => self.single_node_reason = Some(why),
            }
        } else {
            self.single_node_reason = Some("one node asked for".into());
        }
        self.nodes = vec![self.node("n1", None)];
        ("127.0.0.1".into(), vec!["127.0.0.1".into()])
    }

    fn node(&self, name: &str, netns: Option<String>) -> Node {
        Node { name: name.into(), home: self.path(&format!("homes/{name}")), netns }
    }

    /// One namespace per node, joined to the host by a veth pair in 198.18.N.0/24 (a range
    /// reserved for tests); the controller listens on the host side of the first pair.
    fn namespaces(&mut self, nodes: usize) -> Result<(String, Vec<String>), String> {
        let tag = std::process::id() % 100_000;
        let mut addresses = Vec::new();
        for n in 1..=nodes {
            let netns = format!("carma-slurm-{tag}-n{n}");
            remember(&format!("netns {netns}"));
            let (host, peer) = (format!("csl{tag}h{n}"), format!("csl{tag}p{n}"));
            remember(&format!("link {host}"));
            let steps: Vec<Vec<String>> = [
                format!("netns add {netns}"),
                format!("link add {host} type veth peer name {peer}"),
                format!("link set {peer} netns {netns}"),
                format!("addr add 198.18.{n}.1/24 dev {host}"),
                format!("link set {host} up"),
                format!("-n {netns} addr add 198.18.{n}.2/24 dev {peer}"),
                format!("-n {netns} link set {peer} up"),
                format!("-n {netns} link set lo up"),
                format!("-n {netns} route add default via 198.18.{n}.1"),
            ]
            .iter()
            .map(|s| s.split(' ').map(String::from).collect())
            .collect();
            for step in steps {
                let out = Command::new("ip").args(&step).output().map_err(|e| format!("ip: {e}"))?;
                if !out.status.success() {
                    let why = format!(
                        "`ip {}` failed: {}",
                        step.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                    self.nodes.push(self.node(&format!("n{n}"), Some(netns)));
                    self.remove_namespaces();
                    return Err(why);
                }
            }
            self.nodes.push(self.node(&format!("n{n}"), Some(netns)));
            addresses.push(format!("198.18.{n}.2"));
        }
        Ok(("198.18.1.1".into(), addresses))
    }

    fn remove_namespaces(&mut self) {
        let tag = std::process::id() % 100_000;
        for (n, node) in self.nodes.iter().enumerate() {
            if let Some(netns) = &node.netns {
                let _ = Command::new("ip").args(["netns", "del", netns]).output();
                // Gone with the namespace, unless a process still holds it.
                let _ = Command::new("ip").args(["link", "del", &format!("csl{tag}h{}", n + 1)]).output();
            }
        }
        self.nodes.clear();
    }

    fn start_munge(&mut self) {
        let (keys, run) = (self.path("munge"), self.path("munge-run"));
        std::fs::create_dir_all(&keys).unwrap();
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut key = vec![0u8; 1024];
        getrandom::fill(&mut key).unwrap();
        std::fs::write(keys.join("key"), &key).unwrap();
        std::fs::set_permissions(keys.join("key"), std::fs::Permissions::from_mode(0o400)).unwrap();
        std::fs::create_dir_all(self.path("run")).unwrap();
        std::fs::create_dir_all(self.path("log")).unwrap();
        let status = Command::new(find_program("munged").unwrap())
            .arg("--force")
            .arg(format!("--socket={}", run.join("sock").display()))
            .arg(format!("--key-file={}", keys.join("key").display()))
            .arg(format!("--pid-file={}", self.path("run/munged.pid").display()))
            .arg(format!("--log-file={}", self.path("log/munged.log").display()))
            .arg(format!("--seed-file={}", keys.join("seed").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("munged");
        assert!(status.success(), "munged did not start: {}", self.logs());
        self.adopt_pid("run/munged.pid");
    }

    fn adopt_pid(&mut self, pid_file: &str) {
        let path = self.path(pid_file);
        let started = Instant::now();
        let pid = loop {
            if let Some(pid) = std::fs::read_to_string(&path).ok().and_then(|t| t.trim().parse::<u32>().ok())
            {
                break pid;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "no {pid_file}: {}", self.logs());
            std::thread::sleep(Duration::from_millis(20));
        };
        self.pids.push(pid);
        remember(&format!("pid {pid}"));
    }

    fn write_config(&self, (controller, addresses): &(String, Vec<String>)) {
        for dir in ["etc", "state", "spool", "work"] {
            std::fs::create_dir_all(self.path(dir)).unwrap();
        }
        for node in &self.nodes {
            std::fs::create_dir_all(self.path(&format!("spool/{}", node.name))).unwrap();
        }
        let work = self.path("work");
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::create_dir_all(self.path("homes")).unwrap();
        let mut gres = String::from("AutoDetect=off\n");
        let mut node_lines = String::new();
        for (node, address) in self.nodes.iter().zip(addresses) {
            let gpus_file = self.init_node(node);
            let dev = self.path(&format!("dev-{}", node.name));
            let gres_json = self.carma_on(
                node,
                &[
                    "slurm",
                    "gres",
                    "--json",
                    "--node",
                    &node.name,
                    "--dev-dir",
                    dev.to_str().unwrap(),
                    "--gpus",
                    &gpus_file,
                ],
            );
            assert!(
                gres_json.status.success(),
                "carma slurm gres: {}",
                String::from_utf8_lossy(&gres_json.stderr)
            );
            let gres_json: serde_json::Value = serde_json::from_slice(&gres_json.stdout).unwrap();
            for line in gres_json["gres_conf"].as_array().unwrap() {
                gres.push_str(line.as_str().unwrap());
                gres.push('\n');
            }
            node_lines.push_str(&format!(
                "NodeName={} NodeAddr={address} CPUs=16 Boards=1 SocketsPerBoard=1 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=4000 Gres={} State=UNKNOWN\n",
                node.name,
                gres_json["node_gres"].as_str().unwrap()
            ));
        }
        std::fs::write(self.path("etc/gres.conf"), gres).unwrap();
        std::fs::write(self.conf(), self.slurm_conf(controller, &node_lines)).unwrap();
        // The hooks and job_submit.lua, written by the real verb, next to slurm.conf.
        let per_gpu = (self.gpu_mib / self.shard_mib).to_string();
        let node = &self.nodes[0];
        let home_template = self.path("homes/%n");
        let out = self.carma_on(
            node,
            &[
                "--home",
                home_template.to_str().unwrap(),
                "slurm",
                "hooks",
                "--install",
                self.path("etc").to_str().unwrap(),
                "--exe",
                self.carma.to_str().unwrap(),
                "--shards-per-gpu",
                &per_gpu,
                "--shard-mib",
                &self.shard_mib.to_string(),
            ],
        );
        assert!(out.status.success(), "carma slurm hooks: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The node's state directory (fake GPUs, a 2 GiB recovery step) and its device files;
    /// returns the `fake:` probe spec.
    fn init_node(&self, node: &Node) -> String {
        let out = self.carma_on(node, &["init"]);
        assert!(out.status.success(), "carma init: {}", String::from_utf8_lossy(&out.stderr));
        let dev = self.path(&format!("dev-{}", node.name));
        std::fs::create_dir_all(&dev).unwrap();
        for i in 0..self.gpus_per_node {
            let device = dev.join(format!("nvidia{i}"));
            let status =
                Command::new("mknod").arg(&device).args(["c", "195", &i.to_string()]).status().unwrap();
            assert!(status.success(), "mknod {}", device.display());
        }
        let file = node.home.join("gpus.json");
        let fake = FakeGpus { node: node.name.clone(), gpus: self.gpus_per_node, gpu_mib: self.gpu_mib };
        write_atomically(&file, &fake.json(1000, &BTreeMap::new()));
        let spec = format!("fake:{}", file.display());
        std::fs::write(
            node.home.join("config.toml"),
            format!("[tick]\ngpus = \"{spec}\"\n\n[sched.recovery]\nstep-mib = 2048\n"),
        )
        .unwrap();
        spec
    }

    fn slurm_conf(&self, controller: &str, node_lines: &str) -> String {
        let (ctld_port, slurmd_port) = free_ports();
        let r = self.dir.path().display();
        format!(
            "ClusterName=carmatest
SlurmctldHost=localhost({controller})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge-run/sock
MpiDefault=none
MailProg=/bin/true
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=3600
SlurmdParameters=config_overrides
GresTypes=gpu,shard
JobRequeue=1
Prolog={r}/etc/carma-prolog
Epilog={r}/etc/carma-epilog
TaskProlog={r}/etc/carma-task-prolog
JobSubmitPlugins=lua
{node_lines}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"
        )
    }

    fn start_daemons(&mut self) {
        let status =
            self.slurm("slurmctld").stdout(Stdio::null()).stderr(Stdio::null()).status().expect("slurmctld");
        assert!(status.success(), "slurmctld did not start: {}", self.logs());
        self.adopt_pid("run/slurmctld.pid");
        let names: Vec<(String, Option<String>)> =
            self.nodes.iter().map(|n| (n.name.clone(), n.netns.clone())).collect();
        for (name, netns) in names {
            let mut cmd = match &netns {
                Some(netns) => {
                    // nsenter switches only the network namespace; `ip netns exec` would also
                    // remount /sys, hiding the cgroup file system slurmd needs.
                    let mut cmd = self.slurm("nsenter");
                    cmd.arg(format!("--net=/run/netns/{netns}")).arg("slurmd");
                    cmd
                }
                None => self.slurm("slurmd"),
            };
            let status =
                cmd.args(["-N", &name]).stdout(Stdio::null()).stderr(Stdio::null()).status().expect("slurmd");
            assert!(status.success(), "slurmd {name} did not start: {}", self.logs());
            self.adopt_pid(&format!("run/slurmd-{name}.pid"));
        }
        let started = Instant::now();
        while !self.all_idle() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "nodes not idle after 30 s: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops slurmctld (SIGTERM, as `systemctl stop` does); its saved state keeps the jobs.
    pub fn stop_controller(&mut self) {
        let pid_file = self.path("run/slurmctld.pid");
        let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        stop(pid);
        self.pids.retain(|&p| p != pid);
        let _ = std::fs::remove_file(pid_file);
    }

    /// Starts slurmctld again (it recovers its jobs from the state directory) and waits
    /// until it answers.
    pub fn start_controller(&mut self) {
        let status =
            self.slurm("slurmctld").stdout(Stdio::null()).stderr(Stdio::null()).status().expect("slurmctld");
        assert!(status.success(), "slurmctld did not start again: {}", self.logs());
        self.adopt_pid("run/slurmctld.pid");
        let started = Instant::now();
        while !self
            .slurm("scontrol")
            .arg("ping")
            .output()
            .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("is UP"))
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "slurmctld not up after 30 s: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn all_idle(&self) -> bool {
        let out = self.slurm("sinfo").args(["-h", "-N", "-o", "%T"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        out.status.success()
            && text.lines().count() == self.nodes.len()
            && text.lines().all(|l| l.trim() == "idle")
    }

    /// `carma sbatch --gpu-mem MEM -J NAME` as `nobody`, its output in `work/out-NAME-JOBID.txt`;
    /// the job id.
    pub fn sbatch(&self, name: &str, mem: &str, extra: &[&str], command: &[&str]) -> u32 {
        let output = format!("--output={}/out-{name}-%j.txt", self.path("work").display());
        let mut argv = vec!["sbatch", "--parsable", "--gpu-mem", mem, "-J", name, &output];
        argv.extend_from_slice(extra);
        argv.push("--");
        argv.extend_from_slice(command);
        let answer = self.as_user("nobody", &self.carma, &argv);
        assert!(answer.status.success(), "carma {argv:?}: {}", String::from_utf8_lossy(&answer.stderr));
        String::from_utf8_lossy(&answer.stdout).trim().parse().expect("a job id")
    }

    /// Job ids still known to the controller (pending, running or completing).
    pub fn queue(&self) -> Vec<String> {
        let out = self.slurm("squeue").args(["-h", "-o", "%i %T %N %b"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
    }

    /// Waits until the queue is empty; fails with the queue and the logs after `limit`.
    pub fn wait_until_empty(&self, limit: Duration) {
        let started = Instant::now();
        loop {
            let queue = self.queue();
            if queue.is_empty() {
                return;
            }
            assert!(started.elapsed() < limit, "jobs left after {limit:?}: {queue:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until no `carma slurm follow` of this cluster runs (they journal ends once Slurm
    /// has completed a job, and watch requeued jobs); fails with the logs after `limit`.
    pub fn wait_for_followers(&self, limit: Duration) {
        let started = Instant::now();
        while !processes_of(&self.conf()).iter().all(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            !cmdline.split(|&b| b == 0).any(|w| w == b"follow")
        }) {
            assert!(started.elapsed() < limit, "followers still running after {limit:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The tail of every daemon log and hook log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.path("log"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.extend(self.nodes.iter().map(|n| n.home.join("slurm-hooks.log")));
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            out.push_str(&format!("\n==> {} <==\n", file.display()));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

/// The lowest pid whose environment names Slurm job `job_id` (the job's batch shell).
pub fn pid_of_job(job_id: u32) -> Option<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            carma::slurm::scontrol::job_in_environ(&environ).is_some_and(|(_, job)| job == job_id)
        })
        .collect();
    pids.sort_unstable();
    pids.first().copied()
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        // The meter writes into the directory, which goes once the fields are dropped.
        drop(self.meter.take());
        let jobs: Vec<String> =
            self.queue().iter().filter_map(|l| l.split(' ').next().map(String::from)).collect();
        if !jobs.is_empty() {
            let _ = self.slurm("scancel").args(&jobs).output();
            let started = Instant::now();
            while !self.queue().is_empty() && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let _ = self.slurm("scontrol").arg("shutdown").output();
        for &pid in self.pids.iter().rev() {
            stop(pid);
        }
        // Job steps, jobs and detached hooks left over carry this cluster's SLURM_CONF.
        kill_processes_of(&self.conf());
        self.remove_namespaces();
        let _ = std::fs::remove_file(STATE_PATH);
    }
}

/// SIGTERM, then SIGKILL after 5 s.
fn stop(pid: u32) {
    let pid = pid as libc::pid_t;
    // SAFETY: signalling a pid this test started; kill has no memory preconditions.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let started = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Records a daemon pid or namespace for the next run, in case this one is killed.
fn remember(line: &str) {
    if let Ok(mut file) = File::options().create(true).append(true).open(STATE_PATH) {
        let _ = writeln!(file, "{line}");
    }
}

/// Stops the daemons (by pid, only if they still are Slurm or munge daemons) and removes the
/// namespaces that a killed run recorded.
fn clean_up_after_a_killed_run() {
    let Ok(text) = std::fs::read_to_string(STATE_PATH) else { return };
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("pid", pid)) => {
                let Ok(pid) = pid.parse::<u32>() else { continue };
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if ["slurmctld", "slurmd", "munged"].contains(&comm.trim()) {
                    stop(pid);
                }
            }
            Some(("conf", conf)) => {
                kill_processes_of(Path::new(conf));
                // The killed run's temporary directory: DIR/etc/slurm.conf.
                if let Some(dir) = Path::new(conf).parent().and_then(Path::parent)
                    && dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("carma-slurm-"))
                {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            Some(("netns", name)) => {
                let _ = Command::new("ip").args(["netns", "del", name]).output();
            }
            Some(("link", name)) => {
                let _ = Command::new("ip").args(["link", "del", name]).output();
            }
            _ => {}
        }
    }
    let _ = std::fs::remove_file(STATE_PATH);
}

/// SIGKILLs every process whose environment has `SLURM_CONF=conf`: the daemons, job steps,
/// jobs and detached hooks of one test cluster, and nothing else.
fn kill_processes_of(conf: &Path) {
    for pid in processes_of(conf) {
        // SAFETY: signalling a process of this test's cluster; no memory is touched.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Every process but this one whose environment has `SLURM_CONF=conf`.
fn processes_of(conf: &Path) -> Vec<i32> {
    let needle = format!("SLURM_CONF={}", conf.display()).into_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid as u32 != std::process::id())
        .filter(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            environ.split(|&b| b == 0).any(|entry| entry == needle.as_slice())
        })
        .collect()
}

/// Two TCP ports free right now, for slurmctld and slurmd.
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let b = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    (a.local_addr().unwrap().port(), b.local_addr().unwrap().port())
}
