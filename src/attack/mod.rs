//! Attacks: one engine ([`engine::attack`]) driven by objectives ([`objective`]); the suites and
//! their scores live in [`suite`].

pub mod engine;
pub mod objective;
pub mod suite;
