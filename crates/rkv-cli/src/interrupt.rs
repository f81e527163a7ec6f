//! SIGINT for the commands that stop early and report what they have (`rkv generate`):
//! the first SIGINT sets a flag the command polls; a second one ends the process at once
//! with status 130, for a command that does not get to poll.
//!
//! `rkv serve` watches its signals itself (`serve.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

/// Installs the SIGINT handler (in place when this returns) and returns the flag it sets.
pub fn watch() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the signal watcher")?;
    let mut int = {
        let _in_runtime = rt.enter();
        signal(SignalKind::interrupt()).context("cannot watch SIGINT")?
    };
    let set = Arc::clone(&flag);
    std::thread::Builder::new()
        .name("rkv-sigint".into())
        .spawn(move || {
            rt.block_on(async move {
                if int.recv().await.is_some() {
                    set.store(true, Ordering::Relaxed);
                }
                if int.recv().await.is_some() {
                    std::process::exit(130);
                }
            })
        })
        .context("cannot start the signal watcher")?;
    Ok(flag)
}
