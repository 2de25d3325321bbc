//! The systemd units that run carma on a server: the tick service and its timer, and the
//! MPS control daemon for `sharing = "mps"`.
//!
//! The tick is a oneshot service: systemd kills whatever is left in a oneshot's cgroup when
//! it exits, so the tick starts each supervisor in its own transient unit
//! (`systemd-run --unit carma-task-ID-N --collect`), never as a plain child.

use std::path::Path;

/// Directory for the MPS pipes; jobs get it as `CUDA_MPS_PIPE_DIRECTORY`.
pub const MPS_PIPE_DIR: &str = "/run/carma-mps/pipe";
/// Directory for the MPS daemon's logs.
pub const MPS_LOG_DIR: &str = "/var/log/carma-mps";

/// One unit file: its name and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// The unit's file name (`carma-tick.service`, …).
    pub name: &'static str,
    /// The unit file's content.
    pub text: String,
}

/// Which systemd instance runs the units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    /// The machine's (`systemctl`), for the system queue: the tick, its timer, the MPS daemon.
    System,
    /// A user's own (`systemctl --user`), for a personal queue: the tick and its timer.
    User,
}

/// The units for a carma binary at `exe` and a state directory at `home`: three for the
/// system manager, two (no MPS daemon) for a user's.
pub fn units_for(manager: Manager, exe: &Path, home: &Path) -> Vec<Unit> {
    let mut units = units(exe, home);
    if manager == Manager::User {
        units.retain(|u| u.name != "carma-mps.service");
        for unit in &mut units {
            // A user's manager knows neither the driver's units nor the machine's MPS daemon,
            // and its timers hang off its own timers.target.
            unit.text = unit
                .text
                .replace("After=local-fs.target nvidia-persistenced.service carma-mps.service\n", "");
        }
    }
    units
}

/// The three units for a carma binary at `exe` and a state directory at `home`.
pub fn units(exe: &Path, home: &Path) -> Vec<Unit> {
    let exe = exe.display();
    let home = home.display();
    vec![
        Unit {
            name: "carma-tick.service",
            text: format!(
                "[Unit]\n\
                 Description=carma tick: ingest submissions, reconcile and place GPU jobs\n\
                 Documentation=man:carma(1)\n\
                 After=local-fs.target nvidia-persistenced.service carma-mps.service\n\
                 \n\
                 [Service]\n\
                 Type=oneshot\n\
                 ExecStart={exe} --home {home} tick\n\
                 # Jobs run in their own transient units (systemd-run), so ending this\n\
                 # oneshot's cgroup never takes a job with it.\n\
                 TimeoutStartSec=60s\n\
                 UMask=0022\n"
            ),
        },
        Unit {
            name: "carma-tick.timer",
            text: "[Unit]\n\
                   Description=Run carma tick every 5 seconds\n\
                   \n\
                   [Timer]\n\
                   OnBootSec=10s\n\
                   OnUnitActiveSec=5s\n\
                   # The default accuracy of one minute would make a 5 s timer fire once a minute.\n\
                   AccuracySec=1s\n\
                   Persistent=true\n\
                   Unit=carma-tick.service\n\
                   \n\
                   [Install]\n\
                   WantedBy=timers.target\n"
                .to_string(),
        },
        Unit {
            name: "carma-mps.service",
            text: format!(
                "[Unit]\n\
                 Description=NVIDIA MPS control daemon for carma (sharing = \"mps\")\n\
                 After=nvidia-persistenced.service\n\
                 \n\
                 [Service]\n\
                 Type=forking\n\
                 Environment=CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_DIR}\n\
                 Environment=CUDA_MPS_LOG_DIRECTORY={MPS_LOG_DIR}\n\
                 Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID\n\
                 ExecStartPre=/usr/bin/mkdir -p {MPS_PIPE_DIR} {MPS_LOG_DIR}\n\
                 ExecStart=/usr/bin/nvidia-cuda-mps-control -d\n\
                 ExecStop=/bin/sh -c 'echo quit | /usr/bin/nvidia-cuda-mps-control'\n\
                 Restart=on-failure\n\
                 \n\
                 [Install]\n\
                 WantedBy=multi-user.target\n"
            ),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_fires_every_five_seconds_with_one_second_accuracy() {
        let units = units(Path::new("/usr/local/bin/carma"), Path::new("/var/lib/carma"));
        let timer = &units.iter().find(|u| u.name == "carma-tick.timer").unwrap().text;
        for line in ["OnUnitActiveSec=5s", "AccuracySec=1s", "Persistent=true", "WantedBy=timers.target"] {
            assert!(timer.lines().any(|l| l == line), "timer has {line}");
        }
        let service = &units[0].text;
        assert!(service.lines().any(|l| l == "ExecStart=/usr/local/bin/carma --home /var/lib/carma tick"));
        assert!(service.lines().any(|l| l == "Type=oneshot"));
        let mps = &units[2].text;
        assert!(mps.contains("ExecStart=/usr/bin/nvidia-cuda-mps-control -d"));
    }

    /// Goal: a user's units are the tick and its timer, with nothing of the machine's.
    #[test]
    fn user_units_are_the_tick_and_its_timer_only() {
        let units = units_for(Manager::User, Path::new("/home/a/bin/carma"), Path::new("/home/a/q"));
        let names: Vec<_> = units.iter().map(|u| u.name).collect();
        assert_eq!(names, ["carma-tick.service", "carma-tick.timer"]);
        assert!(!units[0].text.contains("nvidia-persistenced"), "{}", units[0].text);
        assert!(units[0].text.lines().any(|l| l == "ExecStart=/home/a/bin/carma --home /home/a/q tick"));
        assert!(units[1].text.lines().any(|l| l == "WantedBy=timers.target"));
        assert_eq!(units_for(Manager::System, Path::new("/c"), Path::new("/q")).len(), 3);
    }
}
