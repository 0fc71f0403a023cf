//! Progress display and Ctrl-C for the long commands (`check`, `explore`, `conform`, `run`, `time`, `shrink`,
//! `gen`): a progress bar on stderr fed by polling the counters a search, a run or a command's loop updates
//! ([`cuorder_sim::progress::Progress`]), and a Ctrl-C handler that sets their stop flag. The work itself knows
//! nothing of either; stdout never depends on the bar, and after a Ctrl-C it holds what was done so far.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cuorder_sim::progress::Progress;
use indicatif::{HumanCount, ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// What a search counts, and the limits to show beside the count.
#[derive(Clone, Copy, Debug)]
pub enum Meter {
    /// States visited (exhaustive search), out of `max_states`; `max_time_s` in seconds.
    States { max_states: u64, max_time_s: u64 },
    /// States visited by a bounded search now at some bound of at most `bound`.
    Bounded { bound: u32, max_states: u64, max_time_s: u64 },
    /// Executions finished (sampling strategies), out of `executions`; `time_limit_s` in seconds if any.
    Executions { executions: u64, time_limit_s: Option<f64> },
    /// Steps of a single run (`run`, `time`), out of `max_steps`; `time_limit_s` in seconds if any.
    Steps { max_steps: u64, time_limit_s: Option<f64> },
    /// Work items of a command's own loop ([`Progress::items`]), out of `total`, each a `unit` (plural: "programs",
    /// "candidates").
    Items { total: u64, unit: &'static str },
}

impl Meter {
    /// What the Ctrl-C handler says it does ("stopping the search and printing what it found so far").
    fn stopping(self) -> &'static str {
        match self {
            Meter::States { .. } | Meter::Bounded { .. } | Meter::Executions { .. } => "stopping the search and printing what it found so far",
            Meter::Steps { .. } => "stopping the run and printing it so far",
            Meter::Items { .. } => "stopping and printing what was done so far",
        }
    }
}

/// How often the display polls the counters.
const POLL: Duration = Duration::from_millis(100);

/// A progress display over a search's [`Progress`]: started before the search, [`Watch::finish`]ed after it (the
/// bar is then erased, so the report printed next starts on a clean line).
pub struct Watch {
    progress: Arc<Progress>,
    bar: ProgressBar,
    done: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
    meter: Meter,
}

impl Watch {
    /// Starts a display of `meter` on stderr when `draw` (hidden otherwise: the counters are still shared, for
    /// Ctrl-C), polling every 100 ms from a thread of its own. On a terminal it draws through indicatif's own
    /// terminal handling; elsewhere (`--progress always` into a pipe or file) with plain ANSI sequences.
    pub fn start(draw: bool, meter: Meter) -> Watch {
        let progress = Arc::new(Progress::new());
        let target = match (draw, std::io::stderr().is_terminal()) {
            (false, _) => ProgressDrawTarget::hidden(),
            (true, true) => ProgressDrawTarget::stderr_with_hz(10),
            (true, false) => ProgressDrawTarget::term_like_with_hz(Box::new(Stderr), 10),
        };
        let (len, unit) = match meter {
            Meter::States { max_states, .. } | Meter::Bounded { max_states, .. } => (max_states, "states"),
            Meter::Executions { executions, .. } => (executions, "executions"),
            Meter::Steps { max_steps, .. } => (max_steps, "steps"),
            Meter::Items { total, unit } => (total, unit),
        };
        let template = format!("[{{elapsed_precise}}] {{bar:20}} {{human_pos}}/{{human_len}} {unit} {{msg}}");
        let style = ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::with_draw_target(Some(len), target).with_style(style);
        let done = Arc::new(AtomicBool::new(false));
        if draw {
            // Drawn once before the search starts, so that even a search over before the first poll shows (and then
            // erases) its bar.
            update(&bar, &progress, meter, Duration::ZERO);
            bar.tick();
        }
        let poller = draw.then(|| {
            let (progress, bar, done) = (progress.clone(), bar.clone(), done.clone());
            let started = Instant::now();
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    update(&bar, &progress, meter, started.elapsed());
                    std::thread::sleep(POLL);
                }
            })
        });
        Watch { progress, bar, done, poller, meter }
    }

    /// The counters and stop flag to hand to the search.
    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }

    /// Makes Ctrl-C (SIGINT) stop the work: the first one sets the stop flag (the work then reports what it did,
    /// naming [`cuorder_sim::progress::INTERRUPTED`]) and says so on stderr; a second one exits at once with status
    /// 130. Errors: the handler cannot be installed (the message says why); the work then runs without it.
    pub fn stop_on_ctrl_c(&self) -> Result<(), String> {
        let (progress, bar) = (self.progress.clone(), self.bar.clone());
        let line = format!("interrupted: {} (Ctrl-C again to quit at once)\n", self.meter.stopping());
        ctrlc::set_handler(move || {
            if progress.request_stop() {
                std::process::exit(130);
            }
            bar.suspend(|| {
                let _ = std::io::stderr().write_all(line.as_bytes());
            });
        })
        .map_err(|e| format!("cannot handle Ctrl-C: {e}"))
    }

    /// Stops the display and erases the bar.
    pub fn finish(mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.poller.take() {
            let _ = t.join();
        }
        self.bar.finish_and_clear();
    }
}

/// One refresh of the bar from the counters, `elapsed` after the start.
fn update(bar: &ProgressBar, p: &Progress, meter: Meter, elapsed: Duration) {
    let rate = |n: u64| HumanCount((n as f64 / elapsed.as_secs_f64().max(1e-3)) as u64);
    match meter {
        Meter::States { max_time_s, .. } => {
            let n = p.states();
            bar.set_position(n);
            bar.set_message(format!("({}/s) · time limit {max_time_s} s", rate(n)));
        }
        Meter::Bounded { bound, max_time_s, .. } => {
            let n = p.states();
            bar.set_position(n);
            bar.set_message(format!("({}/s) · bound {} of {bound} · time limit {max_time_s} s", rate(n), p.bound()));
        }
        Meter::Executions { time_limit_s, .. } => {
            let n = p.executions();
            bar.set_position(n);
            let limit = time_limit_s.map(|s| format!(" · time limit {s} s")).unwrap_or_default();
            bar.set_message(format!("({}/s) · {} steps{limit}", rate(n), HumanCount(p.steps())));
        }
        Meter::Steps { time_limit_s, .. } => {
            let n = p.steps();
            bar.set_position(n);
            let limit = time_limit_s.map(|s| format!(" · time limit {s} s")).unwrap_or_default();
            bar.set_message(format!("({}/s){limit}", rate(n)));
        }
        Meter::Items { .. } => {
            let n = p.items();
            bar.set_position(n);
            bar.set_message(format!("({}/s)", rate(n)));
        }
    }
}

/// Standard error as a terminal for indicatif, whatever it is connected to (`--progress always`): ANSI cursor
/// movements, width from `COLUMNS` or 80.
#[derive(Debug)]
struct Stderr;

impl Stderr {
    fn put(&self, s: &str) -> std::io::Result<()> {
        std::io::stderr().lock().write_all(s.as_bytes())
    }
}

impl TermLike for Stderr {
    fn width(&self) -> u16 {
        std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).unwrap_or(80)
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        if n > 0 { self.put(&format!("\x1b[{n}A")) } else { Ok(()) }
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        if n > 0 { self.put(&format!("\x1b[{n}B")) } else { Ok(()) }
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        if n > 0 { self.put(&format!("\x1b[{n}C")) } else { Ok(()) }
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        if n > 0 { self.put(&format!("\x1b[{n}D")) } else { Ok(()) }
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.put(&format!("{s}\n"))
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.put("\r\x1b[2K")
    }

    fn flush(&self) -> std::io::Result<()> {
        std::io::stderr().lock().flush()
    }
}

/// [`Watch::start`], and Ctrl-C made to stop the work ([`Watch::stop_on_ctrl_c`]); a handler that cannot be
/// installed is said on stderr (`warning: ..`), and the work runs without it. Each command calls it once.
pub fn watch(draw: bool, meter: Meter) -> Watch {
    let w = Watch::start(draw, meter);
    if let Err(e) = w.stop_on_ctrl_c() {
        crate::cli::err(&format!("warning: {e}\n"));
    }
    w
}
