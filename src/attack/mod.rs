//! Attacks: one engine ([`engine::attack`]) driven by objectives ([`objective`]), plus Carlini and
//! Wagner's L∞ optimiser ([`cw`]) over the same objectives; the suites and their scores live in
//! [`suite`].

pub mod cw;
pub mod engine;
pub mod objective;
pub mod suite;
