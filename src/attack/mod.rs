//! Attacks: one engine ([`engine::Request`]) driven by objectives ([`objective`]), plus Carlini and
//! Wagner's L∞ optimiser ([`cw`]) over the same objectives. Each attack is a unit
//! ([`unit::Attack`], one file per family in [`units`]) and each way of moving the images a
//! [`method::Method`]; [`registry`] names them, [`suite`] runs them over a [`context`], and
//! [`score`] aggregates ERS and ARS. [`profile`] holds the papers' budgets.

pub mod adversarial;
pub mod budget;
pub mod column;
pub mod computable;
pub mod context;
pub mod crossing;
pub mod cw;
pub mod engine;
pub mod method;
pub mod objective;
pub mod oracle;
pub mod per_query;
pub mod profile;
pub mod record;
pub mod registry;
pub mod result;
pub mod robustness;
pub mod share;
pub mod spec;
pub mod suite;
pub mod tally;
pub mod unit;
pub mod units;
