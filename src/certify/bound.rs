//! The two numbers a randomized-smoothing certificate needs: a one-sided Clopper–Pearson lower
//! confidence bound on a binomial proportion, and the standard normal quantile Φ⁻¹.

/// The lower end `p` of the one-sided Clopper–Pearson interval at level `1 − alpha` for `k`
/// successes in `n` trials: the `alpha` quantile of Beta(k, n − k + 1), so that
/// `P(X ≥ k | p) = alpha` (0 for `k = 0`). Cohen, Rosenfeld and Kolter's `LowerConfBound`
/// (ICML 2019, Algorithm "certify"; their code: `proportion_confint(k, n, alpha=2·alpha,
/// method="beta")[0]`).
pub fn clopper_pearson_lower(k: u64, n: u64, alpha: f64) -> f64 {
    if k == 0 || n == 0 {
        return 0.0;
    }
    let (a, b) = (k as f64, (n - k.min(n)) as f64 + 1.0);
    // I_p(a, b) grows with p: bisect for I_p = alpha (60 halvings reach f64's resolution).
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if incomplete_beta(a, b, mid) < alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The standard normal quantile Φ⁻¹(p) for 0 < p < 1 (±∞ at the ends), by bisection on
/// `Φ(x) = erfc(−x/√2)/2`, exact to f64's resolution.
pub fn normal_quantile(p: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let phi = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
    let (mut lo, mut hi) = (-40.0f64, 40.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if phi(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The regularised incomplete beta function `I_x(a, b)`, by its continued fraction (Lentz's
/// method, Numerical Recipes §6.4), on the side where it converges fast.
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = libm::lgamma(a + b) - libm::lgamma(a) - libm::lgamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * continued_fraction(a, b, x) / a
    } else {
        1.0 - ln_front.exp() * continued_fraction(b, a, 1.0 - x) / b
    }
}

fn continued_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    d = 1.0 / if d.abs() < TINY { TINY } else { d };
    let mut h = d;
    for m in 1..10_000 {
        let m = m as f64;
        let m2 = 2.0 * m;
        for aa in [
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ] {
            d = 1.0 + aa * d;
            d = 1.0 / if d.abs() < TINY { TINY } else { d };
            c = 1.0 + aa / c;
            c = if c.abs() < TINY { TINY } else { c };
            h *= d * c;
        }
        if (d * c - 1.0).abs() < 3e-16 {
            break;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clopper_pearson_is_scipys_beta_quantile() {
        // scipy.stats.beta.ppf(alpha, k, n − k + 1), scipy 1.x.
        for (k, n, alpha, want) in [
            (9990, 10000, 0.001, 0.9975883080325683),
            (5100, 10000, 0.001, 0.4944993067265927),
            (7000, 10000, 0.001, 0.6856575766807298),
            (99, 100, 0.001, 0.9113731112960424),
            (1, 10, 0.05, 0.005116196891823701),
        ] {
            let got = clopper_pearson_lower(k, n, alpha);
            assert!((got - want).abs() < 1e-10, "k {k} n {n}: {got} vs {want}");
        }
        // Every trial a success: alpha^(1/n).
        let all = clopper_pearson_lower(10_000, 10_000, 0.001);
        assert!((all - 0.001f64.powf(1e-4)).abs() < 1e-12, "{all}");
        assert_eq!(clopper_pearson_lower(0, 100, 0.001), 0.0);
    }

    #[test]
    fn the_normal_quantile_is_scipys() {
        for (p, want) in [
            (0.975, 1.959963984540054),
            (0.999, 3.090232306167813),
            (0.6, 0.2533471031357997),
        ] {
            assert!((normal_quantile(p) - want).abs() < 1e-12, "{p}");
            assert!((normal_quantile(1.0 - p) + want).abs() < 1e-12, "{p}");
        }
        assert!(normal_quantile(0.5).abs() < 1e-15);
        assert!(normal_quantile(1.0).is_infinite() && normal_quantile(0.0) < 0.0);
    }
}
