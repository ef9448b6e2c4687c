//! The jobs as both front ends ask for them: each a request with its defaults, its validation and
//! its `run`, filled by the command line's options or the Python package's keywords. A job opens
//! its device only once its request is checked, through the front end's own way of saying which
//! device it opened.

pub mod attack;
pub mod certify;
pub mod embed;
pub mod metrics;
pub mod robustness;
pub mod train;

pub use attack::{AttackJob, Attacked};
pub use certify::{Certified, CertifyJob};
pub use embed::{EmbedJob, Embedded};
pub use metrics::{Labelled, MetricsJob};
pub use robustness::{Assessed, RobustnessJob};
pub use train::TrainJob;
