//! What a rank process tells the supervisor: one RON message per line, appended to the rank's log file with one
//! `write` each (so everything written before a SIGKILL is kept), read back incrementally by the supervisor.
//! Also the small files a run shares: the unique-id file and the file-based host barriers.

use crate::error::HwError;
use crate::observation::{ClockAnchor, GpuInfo};
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// One message from a rank process. Times: host ns since the run's start; `gpu`-times: `%globaltimer` ns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Set-up began on this GPU.
    Hello { rank: u32, pid: u32, gpu: GpuInfo, driver_version: Option<i32>, nccl_version: Option<i32> },
    /// The clock pairing measured during set-up.
    Anchor(ClockAnchor),
    /// Set-up done, every rank passed the start barrier: host threads start now.
    Ready { ns: u64 },
    /// A host thread entered op `op`.
    Enter { thread: u32, op: u32, ns: u64 },
    /// The call returned (`query_ready` for queries).
    Return { thread: u32, op: u32, ns: u64, query_ready: Option<bool> },
    /// What a host read saw (4-byte words; `words == 0` for an empty range).
    HostRead { thread: u32, op: u32, first: u32, last: u32, min: u32, max: u32, words: u64 },
    /// A trace slot changed: GPU times, 0 = not yet.
    Trace { slot: u32, start: u64, end: u64 },
    /// A kernel probe finished.
    Probe { slot: u32, first: u32, last: u32, min: u32, max: u32 },
    /// The call returned an error; the rank stops.
    OpError { thread: u32, op: u32, message: String },
    /// A host thread returned from its last op.
    ThreadDone { thread: u32 },
    /// The final device synchronization after the program returned (all device work ended).
    Synced { ns: u64 },
    /// A batch worker starts program `index` (0-based line of the batch file); everything until the matching
    /// [`Msg::ProgramEnd`] belongs to it.
    Program { index: u64, ns: u64 },
    /// A batch worker is done with program `index` (its device work has ended and its resources are released).
    ProgramEnd { index: u64, ns: u64 },
    /// The rank process is exiting normally.
    Done,
    /// The rank process failed outside any op (set-up) and is exiting.
    Fatal { message: String },
}

/// The run's clock: CLOCK_MONOTONIC in ns (shared by all processes of the machine).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The writing end: a log file shared by the rank's threads.
pub struct LogWriter {
    file: Mutex<std::fs::File>,
    t0_ns: u64,
}

impl LogWriter {
    /// Creates (truncates) the log file. `t0_ns` is the run's start on [`monotonic_ns`]'s clock.
    ///
    /// Errors: [`HwError::Io`].
    pub fn create(path: &Path, t0_ns: u64) -> Result<LogWriter, HwError> {
        let file = std::fs::File::create(path).map_err(|e| HwError::io(format!("creating {}", path.display()), e))?;
        Ok(LogWriter { file: Mutex::new(file), t0_ns })
    }

    /// Ns since the run's start.
    pub fn now(&self) -> u64 {
        monotonic_ns().saturating_sub(self.t0_ns)
    }

    /// Appends one message as one line with a single `write` (errors are ignored: the supervisor sees a gap).
    pub fn send(&self, m: &Msg) {
        let mut line = ron::to_string(m).unwrap_or_else(|e| format!("Fatal(message:{:?})", e.to_string()));
        line.push('\n');
        let mut f = match self.file.lock() {
            Ok(f) => f,
            Err(p) => p.into_inner(),
        };
        let _ = f.write_all(line.as_bytes());
    }
}

/// The reading end: returns the complete lines added since the last call.
pub struct LogReader {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl LogReader {
    /// A reader of `path` (which may not exist yet).
    pub fn new(path: PathBuf) -> LogReader {
        LogReader { path, offset: 0, partial: Vec::new() }
    }

    /// Reads what was appended; parses every complete line. A line that does not parse becomes an `Err` with the
    /// line's text (the supervisor reports it).
    pub fn poll(&mut self) -> Vec<Result<Msg, String>> {
        let mut out = Vec::new();
        let Ok(mut f) = std::fs::File::open(&self.path) else { return out };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return out;
        }
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return out;
        }
        self.offset += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        while let Some(pos) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=pos).collect();
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            if text.trim().is_empty() {
                continue;
            }
            out.push(ron::from_str::<Msg>(&text).map_err(|e| format!("{e}: {text}")));
        }
        out
    }
}

/// Writes the unique-id file: one hex id per communicator (an empty line for communicators without an id).
///
/// Errors: [`HwError::Io`].
pub fn write_ids(path: &Path, ids: &[Option<String>]) -> Result<(), HwError> {
    let text: String = ids.iter().map(|i| format!("{}\n", i.as_deref().unwrap_or(""))).collect();
    std::fs::write(path, text).map_err(|e| HwError::io(format!("writing {}", path.display()), e))
}

/// Reads the unique-id file written by [`write_ids`].
///
/// Errors: [`HwError::Io`].
pub fn read_ids(path: &Path) -> Result<Vec<Option<String>>, HwError> {
    let text = std::fs::read_to_string(path).map_err(|e| HwError::io(format!("reading {}", path.display()), e))?;
    Ok(text.lines().map(|l| if l.trim().is_empty() { None } else { Some(l.trim().to_string()) }).collect())
}

/// A host barrier across processes through files in the run's folder: each participant creates
/// `<name>.<participant>` and waits until every participant's file exists. `participants` names them all.
///
/// Errors: [`HwError::Io`] if the arrival file cannot be created. Waits forever otherwise (the watchdog ends hangs).
pub fn file_barrier(dir: &Path, name: &str, me: &str, participants: &[String]) -> Result<(), HwError> {
    let mine = dir.join(format!("{name}.{me}"));
    std::fs::write(&mine, b"").map_err(|e| HwError::io(format!("creating {}", mine.display()), e))?;
    let mut pause = Duration::from_micros(20);
    loop {
        if participants.iter().all(|p| dir.join(format!("{name}.{p}")).exists()) {
            return Ok(());
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_micros(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_a_log_and_partial_lines_wait() {
        let dir = std::env::temp_dir().join(format!("cuorder-hw-proto-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let w = LogWriter::create(&path, 0).unwrap();
        let mut r = LogReader::new(path.clone());
        let msgs = vec![
            Msg::Enter { thread: 0, op: 3, ns: 17 },
            Msg::OpError { thread: 1, op: 2, message: "line\nbreak \"quoted\"".into() },
            Msg::Trace { slot: 4, start: 1, end: u64::MAX },
        ];
        for m in &msgs {
            w.send(m);
        }
        // A partial line (as after a SIGKILL mid-write) is held back.
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"Done").unwrap();
        let got: Vec<Msg> = r.poll().into_iter().map(|m| m.unwrap()).collect();
        assert_eq!(got, msgs);
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"\n").unwrap();
        assert_eq!(r.poll(), vec![Ok(Msg::Done)]);
        let ids = vec![Some("ab".to_string()), None];
        write_ids(&dir.join("ids"), &ids).unwrap();
        assert_eq!(read_ids(&dir.join("ids")).unwrap(), ids);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
