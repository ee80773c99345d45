//! Record batch (magic v2) header view.
