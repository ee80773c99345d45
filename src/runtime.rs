//! Running blocking work from async code.

/// Runs `f` on tokio's blocking pool and waits for it. For work that fsyncs or deletes files
/// (creating topics and partitions, the fsync before an acks=all answer): under heavy
/// writeback an fsync can take seconds, and on a runtime thread it would stall every
/// connection that thread serves. A panic in `f` is raised again here, as if `f` had run
/// inline.
pub async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
