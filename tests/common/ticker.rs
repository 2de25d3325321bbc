//! `carma tick` as root in a background loop, as the systemd timer runs it, until dropped.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A loop running `carma tick` on one state directory with a pause between ticks.
pub struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Ticks `home` with `pause` between the end of one tick and the start of the next.
    pub fn start(home: &Path, pause: Duration) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, home) = (Arc::clone(&stop), home.to_path_buf());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                let _ =
                    Command::new(env!("CARGO_BIN_EXE_carma")).arg("tick").env("CARMA_HOME", &home).output();
                std::thread::sleep(pause);
            }
        });
        Ticker { stop, thread: Some(thread) }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
