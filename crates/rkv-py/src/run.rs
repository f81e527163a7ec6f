//! Submitting one call's requests to the engine thread and waiting for them with the
//! GIL released: progress reported to a Python callback between waits, Ctrl-C (or any
//! signal handler that raises) cancelling every request of the call.
//!
//! Must not know: how prompts were given, the shapes of the outputs.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use rkv_engine::{
    EngineHandle, GenerationOutput, RequestEvent, RequestId, Submission, SubmitError,
};

/// How often the wait wakes to check for signals and report progress.
const TICK: Duration = Duration::from_millis(50);

/// Runs `subs` to the end; for each request, its samples in order. On error or interrupt every request of the call is cancelled
/// (its blocks freed) before the exception propagates.
pub fn run(
    py: Python<'_>,
    handle: &EngineHandle,
    subs: Vec<Submission>,
    progress: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<Vec<GenerationOutput>>> {
    let (tx, mut rx) = mpsc::channel::<(usize, RequestEvent)>();
    let mut slots: Vec<Vec<Option<GenerationOutput>>> =
        subs.iter().map(|s| vec![None; s.n]).collect();
    let total: usize = subs.iter().map(|s| s.n).sum();
    let mut ids: Vec<RequestId> = Vec::with_capacity(subs.len());
    let cancel_all = |ids: &[RequestId]| ids.iter().for_each(|&id| handle.cancel(id));
    for (i, sub) in subs.into_iter().enumerate() {
        let tx = tx.clone();
        let sink = Box::new(move |ev: RequestEvent| match ev {
            RequestEvent::Token { .. } => true,
            other => tx.send((i, other)).is_ok(),
        });
        match handle.submit(sub, sink) {
            Ok(id) => ids.push(id),
            Err(e) => {
                cancel_all(&ids);
                return Err(match e {
                    SubmitError::Invalid(e) => PyValueError::new_err(format!("prompts[{i}]: {e}")),
                    other => PyRuntimeError::new_err(other.to_string()),
                });
            }
        }
    }
    drop(tx);
    let mut done = 0usize;
    while done < total {
        let rx = &mut rx;
        let got = py.detach(move || {
            let mut got = Vec::new();
            match rx.recv_timeout(TICK) {
                Ok(ev) => got.push(ev),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(()),
            }
            got.extend(rx.try_iter());
            Ok(got)
        });
        let Ok(got) = got else {
            cancel_all(&ids);
            return Err(PyRuntimeError::new_err(
                "the engine stopped before the requests finished",
            ));
        };
        let before = done;
        for (i, ev) in got {
            match ev {
                RequestEvent::Finished { index, output } => {
                    if let Some(slot) = slots.get_mut(i).and_then(|s| s.get_mut(index)) {
                        if slot.replace(output).is_none() {
                            done += 1;
                        }
                    }
                }
                RequestEvent::Failed { index, error } => {
                    cancel_all(&ids);
                    return Err(PyRuntimeError::new_err(format!(
                        "prompts[{i}] sample {index} failed: {error}"
                    )));
                }
                RequestEvent::Token { .. } => {}
            }
        }
        let interrupted = py.check_signals().and_then(|()| match progress {
            Some(cb) if done > before => cb.call1((done - before,)).map(|_| ()),
            _ => Ok(()),
        });
        if let Err(e) = interrupted {
            cancel_all(&ids);
            return Err(e);
        }
    }
    Ok(slots
        .into_iter()
        .map(|s| s.into_iter().flatten().collect())
        .collect())
}
