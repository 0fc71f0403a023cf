//! The packed observation format: thousands of hardware runs in one small text file. One header line, `meta` and
//! `env` lines, then one tab-separated line per run holding what conformance checks and the race analysis need —
//! the outcome, every read's version, every device span (relative to the run's first) and every query answer —
//! plus a fingerprint of the program it ran, so that programs named by seed can be regenerated and checked to be
//! the same. Host times, evidence, clock anchors and the version table are not kept (the version table follows
//! from lowering the program again).
//!
//! ```text
//! cuorder-packed-observations 1
//! meta generator cover 1 ranks=1 max_threads=3 max_ops=6 pool=true
//! env (gpus:[...],driver_version:Some(13000),...)
//! T  cover-17  9f3a..  5000  Completed  0.0.3.0=0.0.1 0.1.2.0=I  0.0.1:0:0:2048 0.0.3:0:3100:4000  0.1.4=1
//! ```
//! Reads: `rank.thread.op.read_index=SEEN`, SEEN one of `I` (initial), `r.t.i` (the op's write), `?N` (unknown
//! word), `M(first,last,min,max)`, `E` (empty), `N` (not observed). Spans: `r.t.i:gpu:start:end` in ns after the
//! run's earliest device time, `-` when missing. Queries: `r.t.i=1` ready, `=0` not ready. Empty fields are `.`.

use crate::observation::*;
use cuorder_model::program::{OpKind, Program};
use std::collections::BTreeMap;

/// The first line of a packed file.
pub const HEADER: &str = "cuorder-packed-observations 1";

/// FNV-1a (64 bits) of the program's compact RON: names the exact program a packed run belongs to.
pub fn fingerprint(p: &Program) -> String {
    let text = ron::to_string(p).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn op_id(o: OpId) -> String {
    format!("{}.{}.{}", o.rank, o.thread, o.index)
}

fn version(v: &Version) -> String {
    match v {
        Version::Initial => "I".into(),
        Version::Op(o) => op_id(*o),
        Version::Unknown(x) => format!("?{x}"),
    }
}

fn field(items: Vec<String>) -> String {
    if items.is_empty() {
        ".".into()
    } else {
        items.join(" ")
    }
}

/// The `env` line of an environment.
pub fn env_line(e: &Environment) -> String {
    format!("env {}", ron::to_string(e).unwrap_or_default().replace(['\t', '\n'], " "))
}

/// One run as a packed line (no trailing newline). `program` is the program that ran.
pub fn pack(o: &Observation, program: &Program) -> String {
    let reads: Vec<String> = o
        .reads
        .iter()
        .map(|r| {
            let seen = match &r.seen {
                Seen::Uniform(v) => version(v),
                Seen::Mixed { first, last, min, max } => {
                    format!("M({},{},{},{})", version(first), version(last), version(min), version(max))
                }
                Seen::Empty => "E".into(),
                Seen::NotObserved => "N".into(),
            };
            format!("{}.{}={seen}", op_id(r.op), r.read_index)
        })
        .collect();
    let base = o
        .ops
        .iter()
        .filter_map(|x| x.device)
        .flat_map(|d| [d.start_ns, d.end_ns])
        .flatten()
        .min()
        .unwrap_or(0);
    let t = |x: Option<u64>| x.map_or("-".to_string(), |v| (v - base).to_string());
    let spans: Vec<String> = o
        .ops
        .iter()
        .filter_map(|x| x.device.map(|d| format!("{}:{}:{}:{}", op_id(x.op), d.gpu, t(d.start_ns), t(d.end_ns))))
        .collect();
    let queries: Vec<String> =
        o.ops.iter().filter_map(|x| x.query_ready.map(|q| format!("{}={}", op_id(x.op), u8::from(q)))).collect();
    let outcome = ron::to_string(&o.outcome).unwrap_or_default().replace(['\t', '\n'], " ");
    format!(
        "T\t{}\t{}\t{}\t{outcome}\t{}\t{}\t{}",
        o.program,
        fingerprint(program),
        o.timeout_ms,
        field(reads),
        field(spans),
        field(queries)
    )
}

/// A packed file read back: its `meta` lines and its runs, each with the environment that preceded it.
#[derive(Clone, Debug, Default)]
pub struct Packed {
    /// `meta KEY VALUE...` lines: key -> the rest of the line.
    pub meta: BTreeMap<String, String>,
    /// `meta` key -> the 1-based line that set it (the last one, as in `meta`).
    pub meta_lines: BTreeMap<String, usize>,
    pub runs: Vec<PackedRun>,
    /// Lines that could not be read, as (1-based line, why), in file order. [`parse`] fails on the first;
    /// [`parse_all`] keeps every good line beside them.
    pub bad_lines: Vec<(usize, String)>,
}

/// One packed run, not yet joined with its program.
#[derive(Clone, Debug)]
pub struct PackedRun {
    /// The program's name.
    pub program: String,
    /// [`fingerprint`] of the program that ran.
    pub fingerprint: String,
    /// 1-based line in the file.
    pub line: usize,
    /// The malformed `env` line in force for this run, if any (its environment is unknown: the run is not read).
    pub bad_environment: Option<usize>,
    environment: Environment,
    fields: Vec<String>,
}

fn bad(line: usize, m: impl std::fmt::Display) -> String {
    format!("line {line}: {m}")
}

/// Parses a packed file.
///
/// Errors: a missing or other header, a malformed `env` line, a run line with the wrong number of fields (each
/// error names its line; the first one is returned).
pub fn parse(text: &str) -> Result<Packed, String> {
    let p = parse_all(text)?;
    match p.bad_lines.first() {
        Some((n, why)) => Err(bad(*n, why)),
        None => Ok(p),
    }
}

/// Parses a packed file, keeping every good line: a malformed line (a truncated last line, a run line with the
/// wrong number of fields, an unknown kind of line, a malformed `env` line) goes to [`Packed::bad_lines`], and the
/// runs after a malformed `env` line carry [`PackedRun::bad_environment`] until the next good one.
///
/// Errors: a missing or other header (nothing in the file can be read).
pub fn parse_all(text: &str) -> Result<Packed, String> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim() == HEADER => {}
        _ => return Err(format!("not a packed observation file (its first line must be `{HEADER}`)")),
    }
    let mut out = Packed::default();
    let mut env = Environment::default();
    let mut bad_env = None;
    for (i, l) in lines {
        let n = i + 1;
        if l.trim().is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(rest) = l.strip_prefix("meta ") {
            let (k, v) = rest.split_once(' ').unwrap_or((rest, ""));
            out.meta.insert(k.to_string(), v.to_string());
            out.meta_lines.insert(k.to_string(), n);
        } else if let Some(rest) = l.strip_prefix("env ") {
            match ron::from_str(rest) {
                Ok(e) => {
                    env = e;
                    bad_env = None;
                }
                Err(e) => {
                    out.bad_lines.push((n, format!("environment: {e}")));
                    bad_env = Some(n);
                }
            }
        } else if l.starts_with("T\t") {
            let f: Vec<String> = l.split('\t').map(str::to_string).collect();
            if f.len() != 8 {
                out.bad_lines.push((n, format!("a run line has 8 tab-separated fields, this one {}", f.len())));
                continue;
            }
            out.runs.push(PackedRun {
                program: f[1].clone(),
                fingerprint: f[2].clone(),
                line: n,
                bad_environment: bad_env,
                environment: env.clone(),
                fields: f,
            });
        } else {
            out.bad_lines.push((n, "neither `meta`, `env` nor a run line (`T<tab>...`)".to_string()));
        }
    }
    Ok(out)
}

fn parse_op(s: &str) -> Option<OpId> {
    let mut it = s.split('.').map(|x| x.parse::<u32>().ok());
    let (rank, thread, index) = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(OpId { rank, thread, index })
}

fn parse_version(s: &str) -> Option<Version> {
    if s == "I" {
        Some(Version::Initial)
    } else if let Some(x) = s.strip_prefix('?') {
        x.parse().ok().map(Version::Unknown)
    } else {
        parse_op(s).map(Version::Op)
    }
}

fn items(f: &str) -> impl Iterator<Item = &str> {
    f.split(' ').filter(|x| !x.is_empty() && *x != ".")
}

impl PackedRun {
    /// The observation, rebuilt with the program that ran (whose [`fingerprint`] must match): reads get their
    /// ranges from the program; `ops` lists the ops with a device span or a query answer; the version table,
    /// clock anchors and host times are empty.
    ///
    /// Errors: another program's fingerprint, or a malformed field (naming the line).
    pub fn observation(&self, program: &Program) -> Result<Observation, String> {
        let n = self.line;
        let fp = fingerprint(program);
        if fp != self.fingerprint {
            return Err(bad(
                n,
                format!("run of `{}` was of a program with fingerprint {}, the program given has {fp}", self.program, self.fingerprint),
            ));
        }
        let f = &self.fields;
        let timeout_ms: u64 = f[3].parse().map_err(|e| bad(n, format!("timeout: {e}")))?;
        let outcome: Outcome = ron::from_str(&f[4]).map_err(|e| bad(n, format!("outcome: {e}")))?;
        let op_of = |id: OpId| {
            program
                .ranks
                .get(id.rank as usize)
                .and_then(|r| r.threads.get(id.thread as usize))
                .and_then(|t| t.ops.get(id.index as usize))
        };
        let mut reads = vec![];
        for it in items(&f[5]) {
            let (at, seen) = it.split_once('=').ok_or_else(|| bad(n, format!("read `{it}`")))?;
            let (op, k) = at.rsplit_once('.').ok_or_else(|| bad(n, format!("read `{it}`")))?;
            let op = parse_op(op).ok_or_else(|| bad(n, format!("read `{it}`")))?;
            let k: u32 = k.parse().map_err(|_| bad(n, format!("read `{it}`")))?;
            let kind = op_of(op).map(|o| o.kind.without_assertion());
            let range = match kind.as_deref() {
                Some(OpKind::Kernel { reads, .. }) => reads.get(k as usize).copied(),
                Some(OpKind::HostAccess { range, write: false }) if k == 0 => Some(*range),
                _ => None,
            }
            .ok_or_else(|| bad(n, format!("read `{it}` names no read of the program")))?;
            let seen = match seen {
                "E" => Seen::Empty,
                "N" => Seen::NotObserved,
                s if s.starts_with("M(") && s.ends_with(')') => {
                    let v: Vec<Version> = s[2..s.len() - 1].split(',').filter_map(parse_version).collect();
                    if v.len() != 4 {
                        return Err(bad(n, format!("read `{it}`")));
                    }
                    Seen::Mixed { first: v[0], last: v[1], min: v[2], max: v[3] }
                }
                s => Seen::Uniform(parse_version(s).ok_or_else(|| bad(n, format!("read `{it}`")))?),
            };
            reads.push(ReadObservation { op, read_index: k, range, seen });
        }
        let mut ops: BTreeMap<OpId, OpObservation> = BTreeMap::new();
        fn entry<'a>(
            ops: &'a mut BTreeMap<OpId, OpObservation>,
            id: OpId,
            kind: Option<&OpKind>,
            n: usize,
        ) -> Result<&'a mut OpObservation, String> {
            let kind = kind.ok_or_else(|| bad(n, format!("op {id} is not in the program")))?.name();
            Ok(ops.entry(id).or_insert_with(|| OpObservation {
                op: id,
                kind: kind.to_string(),
                host_enter_ns: None,
                host_return_ns: None,
                device: None,
                finished: None,
                evidence: Evidence::Unknown,
                query_ready: None,
                error: None,
            }))
        }
        for it in items(&f[6]) {
            let p: Vec<&str> = it.split(':').collect();
            let id = (p.len() == 4).then(|| parse_op(p[0])).flatten().ok_or_else(|| bad(n, format!("span `{it}`")))?;
            let num = |s: &str| -> Result<Option<u64>, String> {
                if s == "-" {
                    Ok(None)
                } else {
                    s.parse().map(Some).map_err(|_| bad(n, format!("span `{it}`")))
                }
            };
            let gpu: u32 = p[1].parse().map_err(|_| bad(n, format!("span `{it}`")))?;
            let (start_ns, end_ns) = (num(p[2])?, num(p[3])?);
            entry(&mut ops, id, op_of(id).map(|o| &o.kind), n)?.device = Some(DeviceSpan { gpu, start_ns, end_ns });
        }
        for it in items(&f[7]) {
            let (id, q) = it.split_once('=').ok_or_else(|| bad(n, format!("query `{it}`")))?;
            let id = parse_op(id).ok_or_else(|| bad(n, format!("query `{it}`")))?;
            entry(&mut ops, id, op_of(id).map(|o| &o.kind), n)?.query_ready = Some(q == "1");
        }
        Ok(Observation {
            format_version: FORMAT_VERSION,
            program: self.program.clone(),
            outcome,
            environment: self.environment.clone(),
            timeout_ms,
            versions: Default::default(),
            reads,
            ops: ops.into_values().collect(),
            clock_anchors: vec![],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuorder_model::build::Builder;
    use cuorder_model::program::{MemSpace, StreamKind, StreamRef};

    fn program() -> Program {
        let mut b = Builder::new("p", 1);
        let s = b.stream("s", StreamKind::NonBlocking);
        let a = b.buffer("a", 64, MemSpace::Device, false);
        let h = b.buffer("h", 64, MemSpace::PinnedHost, false);
        let (ra, rh) = (b.whole(0, a), b.whole(0, h));
        let st = StreamRef { rank: 0, index: s };
        b.op(0, 0, OpKind::Kernel { stream: st, name: "w".into(), reads: vec![], writes: vec![ra], duration_ns: 0 })
            .op(0, 0, OpKind::Kernel { stream: st, name: "r".into(), reads: vec![ra, rh], writes: vec![], duration_ns: 0 })
            .op(0, 0, OpKind::StreamQuery { stream: st })
            .op(0, 0, OpKind::HostAccess { range: rh, write: false });
        b.finish()
    }

    fn obs(p: &Program) -> Observation {
        let id = |index| OpId { rank: 0, thread: 0, index };
        let op = |index, kind: &str, device, q| OpObservation {
            op: id(index),
            kind: kind.into(),
            host_enter_ns: None,
            host_return_ns: None,
            device,
            finished: None,
            evidence: Evidence::Unknown,
            query_ready: q,
            error: None,
        };
        let rk = match &p.ranks[0].threads[0].ops[1].kind {
            OpKind::Kernel { reads, .. } => reads.clone(),
            _ => unreachable!(),
        };
        let rh = match &p.ranks[0].threads[0].ops[3].kind {
            OpKind::HostAccess { range, .. } => *range,
            _ => unreachable!(),
        };
        Observation {
            format_version: FORMAT_VERSION,
            program: "p".into(),
            outcome: Outcome::Hung { never_finished: vec![id(1)], threads: vec![ThreadPosition { rank: 0, thread: 0, at: ThreadAt::InOp(3) }] },
            environment: Environment { hostname: Some("h\tx".into()), ..Default::default() },
            timeout_ms: 250,
            versions: Default::default(),
            reads: vec![
                ReadObservation { op: id(1), read_index: 0, range: rk[0], seen: Seen::Uniform(Version::Op(id(0))) },
                ReadObservation {
                    op: id(1),
                    read_index: 1,
                    range: rk[1],
                    seen: Seen::Mixed { first: Version::Initial, last: Version::Unknown(7), min: Version::Initial, max: Version::Op(id(0)) },
                },
                ReadObservation { op: id(3), read_index: 0, range: rh, seen: Seen::NotObserved },
            ],
            ops: vec![
                op(0, "Kernel", Some(DeviceSpan { gpu: 0, start_ns: Some(1_000_000), end_ns: Some(1_002_000) }), None),
                op(1, "Kernel", Some(DeviceSpan { gpu: 0, start_ns: Some(1_003_000), end_ns: None }), None),
                op(2, "StreamQuery", None, Some(false)),
            ],
            clock_anchors: vec![],
        }
    }

    #[test]
    fn a_run_round_trips_through_a_packed_line() {
        let p = program();
        let o = obs(&p);
        let text = format!("{HEADER}\nmeta generator test 1\n{}\n{}\n", env_line(&o.environment), pack(&o, &p));
        let packed = parse(&text).unwrap();
        assert_eq!(packed.meta["generator"], "test 1");
        let back = packed.runs[0].observation(&p).unwrap();
        assert_eq!(back.outcome, o.outcome);
        assert_eq!(back.reads, o.reads);
        assert_eq!(back.environment, o.environment);
        let spans: Vec<_> = back.ops.iter().map(|x| (x.op.index, x.kind.clone(), x.device, x.query_ready)).collect();
        assert_eq!(
            spans,
            vec![
                (0, "Kernel".to_string(), Some(DeviceSpan { gpu: 0, start_ns: Some(0), end_ns: Some(2000) }), None),
                (1, "Kernel".to_string(), Some(DeviceSpan { gpu: 0, start_ns: Some(3000), end_ns: None }), None),
                (2, "StreamQuery".to_string(), None, Some(false)),
            ]
        );
    }

    #[test]
    fn packed_errors_name_the_line_and_another_program_is_refused() {
        let p = program();
        assert!(parse("hello\n").unwrap_err().contains("first line"));
        assert!(parse(&format!("{HEADER}\nT\tx\n")).unwrap_err().starts_with("line 2:"));
        assert!(parse(&format!("{HEADER}\nwhat\n")).unwrap_err().starts_with("line 2:"));
        let text = format!("{HEADER}\n{}\n", pack(&obs(&p), &p));
        let mut other = p.clone();
        other.name = "q".into();
        let e = parse(&text).unwrap().runs[0].observation(&other).unwrap_err();
        assert!(e.contains("fingerprint"), "{e}");
        let bad = text.replace("0.0.1.0=0.0.0", "0.0.9.0=0.0.0");
        let e = parse(&bad).unwrap().runs[0].observation(&p).unwrap_err();
        assert!(e.contains("names no read"), "{e}");
    }
}
