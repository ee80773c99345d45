//! Partition replicas: log + high watermark + leader epoch + producer state.
//!
//! Today every partition is led by this node with an ISR of one; the high-watermark and
//! leader-epoch plumbing is in place for follower fetching and ISR changes.
pub mod partition;
pub mod producer_state;

pub use partition::{AppendError, Appended, Partition};
