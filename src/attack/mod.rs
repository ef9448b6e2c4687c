//! Attacks: one engine ([`engine::attack`]) driven by objectives ([`objective`]), plus Carlini and
//! Wagner's L∞ optimiser ([`cw`]) over the same objectives; the attacks by name ([`kind`]) run
//! over one [`context`] in [`suite`], and are scored into ERS/ARS tables in [`score`].

pub mod context;
pub mod cw;
pub mod engine;
pub mod kind;
pub mod objective;
pub mod score;
pub mod suite;
