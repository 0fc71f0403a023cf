//! The boundary search of the eager window (N2): the largest size that still completes, by doubling (or halving)
//! from a start size until the answer flips, then bisecting the bracket down to a tolerance. Pure over a probe
//! function, so it is tested with fake windows.

use serde::{Deserialize, Serialize};

/// What one probe said about a size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fit {
    /// It completed: the size fits.
    Fits,
    /// It hung: the size does not fit.
    DoesNotFit,
    /// Neither (the run failed, or it was not run): the search stops here.
    Inconclusive(String),
}

/// Parameters of one search. Sizes are multiples of `granule`; the search ends when the bracket is at most
/// `max(granule, lo * rel_tol_ppm / 1e6)` wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchParams {
    /// First size probed (rounded to the granule, at least one granule).
    pub start: u64,
    /// Largest size probed; if it fits, the window is at least this.
    pub max: u64,
    pub granule: u64,
    /// Relative tolerance in parts per million of the largest fitting size.
    pub rel_tol_ppm: u64,
}

/// The outcome of a search.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResult {
    /// Every probe, in order: (size, answer).
    pub probes: Vec<(u64, Fit)>,
    /// The largest size seen to fit (`None`: none did, or none was probed).
    pub largest_fit: Option<u64>,
    /// The smallest size seen not to fit (`None`: every size up to `max` fitted, or none was probed).
    pub smallest_nonfit: Option<u64>,
    /// Why the search stopped before the tolerance was reached, if it did.
    pub stopped: Option<String>,
}

impl SearchResult {
    /// Whether the answers are monotone (every fitting size below every non-fitting one).
    pub fn monotone(&self) -> bool {
        let max_fit = self.probes.iter().filter(|p| p.1 == Fit::Fits).map(|p| p.0).max();
        let min_non = self.probes.iter().filter(|p| p.1 == Fit::DoesNotFit).map(|p| p.0).min();
        match (max_fit, min_non) {
            (Some(a), Some(b)) => a < b,
            _ => true,
        }
    }
}

fn round_down(n: u64, g: u64) -> u64 {
    n / g * g
}

fn round_up(n: u64, g: u64) -> u64 {
    n.div_ceil(g) * g
}

/// Searches the boundary with `probe`. `probe` may be called at most about `2 * log2(max / granule)` times.
pub fn search(params: SearchParams, mut probe: impl FnMut(u64) -> Fit) -> SearchResult {
    let g = params.granule.max(1);
    let max = round_down(params.max, g).max(g);
    let mut res = SearchResult::default();
    let mut ask = |n: u64, res: &mut SearchResult| -> Option<bool> {
        let f = probe(n);
        res.probes.push((n, f.clone()));
        match f {
            Fit::Fits => {
                res.largest_fit = Some(res.largest_fit.map_or(n, |l| l.max(n)));
                Some(true)
            }
            Fit::DoesNotFit => {
                res.smallest_nonfit = Some(res.smallest_nonfit.map_or(n, |s| s.min(n)));
                Some(false)
            }
            Fit::Inconclusive(why) => {
                res.stopped = Some(format!("the probe of {n} bytes was inconclusive: {why}"));
                None
            }
        }
    };
    // Phase 1: bracket, doubling up from the start while it fits, halving down while it does not.
    let mut n = round_up(params.start.max(g), g).min(max);
    loop {
        let Some(fits) = ask(n, &mut res) else { return res };
        if fits {
            if res.smallest_nonfit.is_some() {
                break;
            }
            if n >= max {
                return res; // everything up to max fits
            }
            n = (n.saturating_mul(2)).min(max);
        } else {
            if res.largest_fit.is_some() {
                break;
            }
            if n <= g {
                return res; // not even one granule fits
            }
            n = round_down(n / 2, g).max(g);
        }
    }
    // Phase 2: bisect the bracket.
    while let (Some(lo), Some(hi)) = (res.largest_fit, res.smallest_nonfit) {
        if hi <= lo {
            res.stopped = Some(format!("answers are not monotone: {lo} bytes fit but {hi} bytes did not"));
            break;
        }
        let tol = g.max((lo as u128 * params.rel_tol_ppm as u128 / 1_000_000) as u64);
        if hi - lo <= tol {
            break;
        }
        let mid = round_down(lo + (hi - lo) / 2, g);
        if mid <= lo || mid >= hi {
            break;
        }
        if ask(mid, &mut res).is_none() {
            break;
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;
    const M: u64 = 1024 * 1024;

    fn params(start: u64) -> SearchParams {
        SearchParams { start, max: 1024 * M, granule: 4 * K, rel_tol_ppm: 15_000 }
    }

    fn window(w: u64) -> impl FnMut(u64) -> Fit {
        move |n| if n <= w { Fit::Fits } else { Fit::DoesNotFit }
    }

    #[test]
    fn finds_a_window_within_tolerance() {
        for w in [4 * K, 5 * K, 100 * K, 4 * M, 4 * M + 12 * K, 37 * M + 123, 64 * M, 1000 * M] {
            for start in [4 * K, M, 64 * M] {
                let r = search(params(start), window(w));
                let (lo, hi) = (r.largest_fit.unwrap(), r.smallest_nonfit.unwrap());
                assert!(lo <= w && hi > w, "w {w} start {start}: {lo}..{hi}");
                assert!(hi - lo <= (4 * K).max(lo * 15 / 1000), "w {w} start {start}: {lo}..{hi} too wide");
                assert!(r.stopped.is_none() && r.monotone());
                assert!(r.probes.len() <= 2 * 18 + 2, "w {w} start {start}: {} probes", r.probes.len());
                assert!(r.probes.iter().all(|p| p.0 % (4 * K) == 0 && p.0 <= 1024 * M));
            }
        }
    }

    #[test]
    fn everything_fits_or_nothing_fits() {
        let r = search(params(4 * K), window(u64::MAX));
        assert_eq!((r.largest_fit, r.smallest_nonfit), (Some(1024 * M), None));
        assert_eq!(r.probes.len(), 19);
        let r = search(params(M), window(0));
        assert_eq!((r.largest_fit, r.smallest_nonfit), (None, Some(4 * K)));
        assert_eq!(r.probes.len(), 9); // 1 MiB halved down to 4 KiB
        let r = search(params(3 * K), window(K));
        assert_eq!((r.largest_fit, r.smallest_nonfit), (None, Some(4 * K)));
    }

    #[test]
    fn inconclusive_stops_and_keeps_the_bracket() {
        let mut calls = 0;
        let r = search(params(4 * K), |n| {
            calls += 1;
            if n <= 64 * K {
                Fit::Fits
            } else if calls < 10 {
                Fit::DoesNotFit
            } else {
                Fit::Inconclusive("failed".into())
            }
        });
        assert_eq!(r.largest_fit, Some(64 * K));
        assert!((68 * K..=128 * K).contains(&r.smallest_nonfit.unwrap()), "{r:?}");
        assert!(r.stopped.as_deref().unwrap().contains("inconclusive: failed"), "{:?}", r.stopped);
        assert_eq!(r.probes.len(), 10);
    }

    #[test]
    fn non_monotone_answers_are_reported() {
        // Fits below 16 KiB and in 48..64 KiB only.
        let r = search(params(4 * K), |n| if n < 16 * K || (48 * K..64 * K).contains(&n) { Fit::Fits } else { Fit::DoesNotFit });
        assert!(r.largest_fit.unwrap() < r.smallest_nonfit.unwrap() || r.stopped.is_some());
        let r2 = SearchResult {
            probes: vec![(8 * K, Fit::DoesNotFit), (16 * K, Fit::Fits)],
            largest_fit: Some(16 * K),
            smallest_nonfit: Some(8 * K),
            stopped: None,
        };
        assert!(!r2.monotone());
    }
}
