//! `shoal-sim`: a discrete-event simulator of Shoal at datacenter scale
//! (Katsarakis Ch. 4's EUREKA, rebuilt), and a model of crash recovery.
//!
//! It answers "how fast would this system be on N servers of this kind
//! under this skew" for systems we cannot build here: the EREW and CREW
//! baselines, with and without symmetric caching, under the three
//! coherence protocols and two consistency models.
//!
//! Public surface:
//! - [`Scenario`]: every parameter, from TOML, defaults = Table 4.1;
//! - [`simulate`]: one deterministic run, returning a [`Report`];
//! - [`sweep`]: the seed's figures as named sweeps, with plots;
//! - [`recovery`]: recovery time of a crashed master at a given scale.
//!
//! No I/O happens here except writing plot files when asked; no
//! networking, no threads.

pub mod plan;
pub mod recovery;
pub mod report;
pub mod scenario;
mod sim;
pub mod sweep;
pub mod zipf;

pub use report::Report;
pub use scenario::Scenario;
pub use sim::simulate;
