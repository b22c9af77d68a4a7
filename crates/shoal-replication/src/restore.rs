//! See docs/replication.md.
