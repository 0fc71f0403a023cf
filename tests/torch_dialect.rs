//! The PyTorch dialect's settings and calls added for issue 10's last gaps: `TORCH_NCCL_AVOID_RECORD_STREAMS`
//! (tensors stashed in the work until `wait()` instead of `record_stream`, P4), `dist.all_to_all` (lists) and
//! `dist.all_to_all_single` with split sizes (one group of sends and recvs per peer), and the command line's
//! `--torch-version` / `--torch-init` / `--torch-avoid-record-streams`, which override the program's `torch:`.

mod common;
use common::kinds;
use cuorder_model::format::{load, load_with, TorchInit, TorchOptions, TorchVersion};
use cuorder_model::program::{OpKind, Program};
use cuorder_model::profile::Profile;

fn verdict(p: &Program) -> Vec<String> {
    kinds(&cuorder::report::check(p, &Profile::portable(), &Default::default()))
}

fn loaded(name: &str, text: &str, opts: &TorchOptions) -> Program {
    load_with(name, text, opts)
        .unwrap_or_else(|d| panic!("{name} does not load:\n{}", cuorder::diagnostics::render(name, text, &d, false)))
}

/// The load errors of `text` as "line:column: message".
fn errors(text: &str) -> Vec<String> {
    match load("bad", text) {
        Ok(_) => panic!("loads, but should not"),
        Err(d) => d.iter().map(|d| format!("{}:{}: {}", d.line, d.column, d.message)).collect(),
    }
}

/// Rank 0's ops (its only thread), by kind name, in order.
fn rank0_kinds(p: &Program) -> Vec<&'static str> {
    p.ranks[0].threads[0]
        .ops
        .iter()
        .map(|o| match &o.kind {
            OpKind::RecordStream { .. } => "RecordStream",
            OpKind::Free { .. } => "Free",
            OpKind::Alloc { .. } => "Alloc",
            OpKind::StreamWaitEvent { .. } => "Wait",
            OpKind::Send { .. } => "Send",
            OpKind::Recv { .. } => "Recv",
            OpKind::GroupStart => "GroupStart",
            OpKind::GroupEnd => "GroupEnd",
            OpKind::Memcpy { .. } => "Memcpy",
            OpKind::Collective { .. } => "Collective",
            _ => "other",
        })
        .collect()
}

const AVOID: TorchOptions = TorchOptions { version: None, init: None, avoid_record_streams: Some(true) };
const RECORD: TorchOptions = TorchOptions { version: None, init: None, avoid_record_streams: Some(false) };

/// Megatron-LM issue 4047's shape: an isend's tensor is deleted before the wait and a new tensor is allocated on the
/// same stream. PyTorch guarantees both set-ups clean: record_stream keeps the block from reuse until the send has
/// ended; the stash keeps the tensor alive until `wait()`, where the free comes after the stream wait.
const DEL_BEFORE_WAIT: &str = r#"Program(ranks: 2, torch: Torch(init: Eager, avoid_record_streams: true),
    buffers: [Pooled("t", "1 MiB"), Pooled("u", "1 MiB"), Buffer("r", "1 MiB")],
    threads: [Thread("main", [InitProcessGroup,
        If(rank == 0, then: [Empty("t"), Compute("fill", writes: ["t"]), Isend("t", dst: Rank(1), work: "w"), Del("t"),
                             Empty("u"), Compute("reuse", writes: ["u"]), WorkWait("w")],
                      else: [DistRecv("r", src: Rank(0))]),
        CudaSynchronize])])"#;

#[test]
fn avoid_record_streams_frees_a_deleted_tensor_at_the_wait() {
    let stashed = loaded("stash", DEL_BEFORE_WAIT, &TorchOptions::default());
    let ops = rank0_kinds(&stashed);
    assert!(!ops.contains(&"RecordStream"), "{ops:?}");
    // Del("t") lowers to nothing; the Free comes right after WorkWait's stream wait.
    let free = ops.iter().position(|k| *k == "Free").expect("t is freed");
    assert_eq!(ops[free - 1], "Wait", "{ops:?}");
    assert_eq!(ops.iter().filter(|k| **k == "Alloc").count(), 2);
    assert!(ops.iter().rposition(|k| *k == "Alloc").unwrap() < free, "u is allocated while t is still held: {ops:?}");
    assert_eq!(verdict(&stashed), Vec::<String>::new());
    // record_stream: the Free is at the Del, and the record keeps the block back; the same verdict.
    let recorded = loaded("record", DEL_BEFORE_WAIT, &RECORD);
    let ops = rank0_kinds(&recorded);
    assert!(ops.contains(&"RecordStream"), "{ops:?}");
    assert!(ops.iter().position(|k| *k == "Free") < ops.iter().rposition(|k| *k == "Alloc"), "{ops:?}");
    assert_eq!(verdict(&recorded), Vec::<String>::new());
}

#[test]
fn avoid_record_streams_races_where_the_block_returns_to_an_unsynchronised_stream() {
    // The tensor is allocated on `side`, sent from the default stream, waited for there, then deleted: its block goes
    // back to side's pool, and side is not ordered after the send. record_stream holds the block until the send has
    // ended; the stash (released at the wait, which orders only the default stream) does not: the new tensor's
    // kernel may overwrite the block while the send still reads it.
    let text = r#"Program(ranks: 2, torch: Torch(init: Eager), streams: [Stream("side", NonBlocking)], events: ["filled"],
        buffers: [Pooled("t", "1 MiB"), Pooled("u", "1 MiB"), Buffer("r", "1 MiB")],
        threads: [Thread("main", [InitProcessGroup,
            If(rank == 0, then: [
                WithStream("side", [Empty("t"), Compute("fill", writes: ["t"]), RecordEvent("filled")]),
                WaitEvent("filled"),
                Isend("t", dst: Rank(1), work: "w"), WorkWait("w"), Del("t"),
                WithStream("side", [Empty("u"), Compute("reuse", writes: ["u"])]),
            ], else: [DistRecv("r", src: Rank(0))]),
            CudaSynchronize])])"#;
    assert_eq!(verdict(&loaded("record", text, &TorchOptions::default())), Vec::<String>::new());
    let r = cuorder::report::check(&loaded("stash", text, &AVOID), &Profile::portable(), &Default::default());
    assert_eq!(kinds(&r), ["data race sometimes"]);
    let t = r.to_text();
    assert!(t.contains("the caching allocator handed t's freed block to u"), "{t}");
    assert!(t.contains("send(to r1, t"), "{t}");
}

#[test]
fn a_work_never_waited_for_keeps_its_stash() {
    // The watchdog releases such a stash only once the send has completed, after which reuse is ordered anyway; the
    // model keeps the block allocated (no Free at all), and a later allocation gets a fresh block.
    let text = DEL_BEFORE_WAIT.replace(r#", WorkWait("w")]"#, "]");
    let p = loaded("never", &text, &TorchOptions::default());
    assert!(!rank0_kinds(&p).contains(&"Free"), "{:?}", rank0_kinds(&p));
    assert_eq!(verdict(&p), Vec::<String>::new());
    // The same work name assigned again: the first work's stash is still held (by the watchdog), the second's is
    // released by the wait.
    let text = DEL_BEFORE_WAIT.replace(
        r#"Del("t"),"#,
        r#"Isend("t", dst: Rank(1), work: "w"), Del("t"),"#,
    )
    .replace(r#"else: [DistRecv("r", src: Rank(0))]"#, r#"else: [DistRecv("r", src: Rank(0)), DistRecv("r", src: Rank(0))]"#);
    let p = loaded("twice", &text, &TorchOptions::default());
    assert!(!rank0_kinds(&p).contains(&"Free"), "{:?}", rank0_kinds(&p));
}

#[test]
fn sync_calls_stash_nothing_and_record_nothing_when_avoiding() {
    let text = r#"Program(ranks: 2, torch: Torch(init: Eager), buffers: [Pooled("t", "1 MiB")],
        threads: [Thread("main", [InitProcessGroup, Empty("t"), DistAllReduce("t"), Del("t"), CudaSynchronize])])"#;
    let ops = rank0_kinds(&loaded("ar", text, &AVOID));
    assert!(!ops.contains(&"RecordStream"), "{ops:?}");
    assert_eq!(ops.iter().filter(|k| **k == "Free").count(), 1, "{ops:?}");
    assert!(rank0_kinds(&loaded("ar", text, &RECORD)).contains(&"RecordStream"));
}

#[test]
fn reallocating_a_tensor_a_stash_still_holds_is_a_load_error() {
    let text = DEL_BEFORE_WAIT.replace(r#"Empty("u"), Compute("reuse", writes: ["u"])"#, r#"Empty("t")"#);
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("5:"), "{e:?}");
    assert!(e[0].contains("rank 0: `t` is allocated again while a work still holds its previous block"), "{e:?}");
}

/// Two ranks: rank r keeps 1 + r MiB for itself and sends the other 2 - r MiB (unequal splits).
fn unequal(output_splits: &str, extra: &str) -> String {
    format!(
        r#"Program(ranks: 2, torch: Torch(init: Eager),
    buffers: [Buffer("in", "3 MiB"), Buffer("out", "4 MiB")],
    threads: [Thread("main", [InitProcessGroup, Compute("fill", writes: ["in"]),
        DistAllToAllSingle(output: Slice("out", 0, "3 MiB"), input: "in",
            output_split_sizes: {output_splits},
            input_split_sizes: ["{{1 + rank}} MiB", "{{2 - rank}} MiB"], async_op: "a"),
        {extra}
        WorkWait("a"), Compute("use", reads: ["out"]), CudaSynchronize])])"#
    )
}

const MATCHING: &str = r#"["{1 + rank} MiB", "{2 - rank} MiB"]"#;

#[test]
fn all_to_all_single_with_splits_is_one_group_of_sends_and_recvs() {
    let p = loaded("a2av", &unequal(MATCHING, ""), &TorchOptions::default());
    let ops = rank0_kinds(&p);
    let group: Vec<&str> = ops[ops.iter().position(|k| *k == "GroupStart").unwrap()..].iter().take(5).copied().collect();
    // Rank 0 sends 2 MiB to and receives 2 MiB from rank 1 in one group; its own 1 MiB is a copy.
    assert_eq!(group, ["GroupStart", "Send", "Recv", "GroupEnd", "Memcpy"], "{ops:?}");
    assert!(!ops.contains(&"Collective"), "{ops:?}");
    let sizes: Vec<(u64, u64)> = p.ranks[0].threads[0]
        .ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Send { buf, .. } | OpKind::Recv { buf, .. } => Some((buf.offset, buf.len)),
            _ => None,
        })
        .collect();
    assert_eq!(sizes, [(1 << 20, 2 << 20), (1 << 20, 2 << 20)]);
    assert_eq!(verdict(&p), Vec::<String>::new());
    // Reading the output before the wait races with the recv (and the own part's copy) on the NCCL stream.
    let early = loaded("early", &unequal(MATCHING, r#"Compute("peek", reads: ["out"]),"#), &TorchOptions::default());
    let races = verdict(&early);
    assert!(!races.is_empty() && races.iter().all(|r| r == "data race always"), "{races:?}");
}

#[test]
fn all_to_all_single_split_errors_name_the_sizes() {
    // Rank 1 expects 1 MiB from rank 0, which sends it 2 MiB; and its own part differs (sends itself 1, receives 2).
    let e = errors(&unequal(r#"["1 MiB", "2 MiB"]"#, ""));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].starts_with("5:34: rank 1: this Recv of 1048576 bytes matches a Send of 2097152 bytes"), "{e:?}");
    assert!(e[1].starts_with("5:43: rank 1: this rank's own part differs in size"), "{e:?}");
    // One size per rank.
    let e = errors(&unequal(r#"["3 MiB"]"#, ""));
    assert_eq!(e, ["5:33: `output_split_sizes` has 1 sizes; the group has 2 ranks"]);
    // Sizes add up to the tensor.
    let e = errors(&unequal(r#"["1 MiB", "1 MiB"]"#, ""));
    assert_eq!(e, ["5:33: `output_split_sizes` add up to 2097152 bytes, but `output` is 3145728 bytes"]);
    // Not a size.
    let e = errors(&unequal(r#"["1 MiB", "2 Mib"]"#, ""));
    assert_eq!(e, ["5:43: not a size"]);
    // Without split sizes, the tensor splits into equal parts.
    let text = unequal(MATCHING, "").replace(r#"input: "in","#, r#"input: Slice("in", 0, 5),"#);
    let text = text.replace(r#"input_split_sizes: ["{1 + rank} MiB", "{2 - rank} MiB"], "#, "");
    let e = errors(&text);
    assert_eq!(e, ["4:69: `input` (5 bytes) does not split into 2 equal parts"]);
}

const LISTS: &str = r#"Program(ranks: 2, torch: Torch(init: Eager),
    buffers: [Buffer("i0", "1 MiB"), Buffer("i1", "2 MiB"), Buffer("o0", "1 MiB"), Buffer("o1", "2 MiB"), Buffer("z", "4 KiB")],
    threads: [Thread("main", [InitProcessGroup,
        DistAllToAll(outputs: ["o{rank}", "o{1 - rank}"], inputs: ["i{rank}", "i{1 - rank}"], async_op: "a"),
        WorkWait("a"), Compute("use", reads: ["o0", "o1"]), CudaSynchronize])])"#;

#[test]
fn all_to_all_lists_are_one_group_of_sends_and_recvs() {
    let p = loaded("lists", LISTS, &TorchOptions::default());
    let ops = rank0_kinds(&p);
    let group: Vec<&str> = ops[ops.iter().position(|k| *k == "GroupStart").unwrap()..].iter().take(5).copied().collect();
    assert_eq!(group, ["GroupStart", "Send", "Recv", "GroupEnd", "Memcpy"], "{ops:?}");
    assert_eq!(verdict(&p), Vec::<String>::new());
    // A list of the wrong length, and a zero-sized tensor (skipped, as `if (input.numel() != 0)` does).
    let e = errors(&LISTS.replace(r#"outputs: ["o{rank}", "o{1 - rank}"]"#, r#"outputs: ["o0"]"#));
    assert_eq!(e, ["4:31: `outputs` has 1 tensors; the group has 2 ranks"]);
    // Sizes that do not match the peer's are reported at both tensors.
    let e = errors(&LISTS.replace(r#"inputs: ["i{rank}", "i{1 - rank}"]"#, r#"inputs: ["i0", "i1"]"#));
    assert!(e.iter().any(|e| e.contains("this Recv of 2097152 bytes matches a Send of 1048576 bytes")), "{e:?}");
}

#[test]
fn the_options_override_the_programs_torch_settings() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/torch/megatron-batch-p2p.ron")).unwrap();
    assert_eq!(verdict(&loaded("m", &text, &TorchOptions::default())), ["data race always"; 4]);
    let since = TorchOptions { version: Some(TorchVersion::Since82450), ..Default::default() };
    assert_eq!(verdict(&loaded("m", &text, &since)), Vec::<String>::new());
    // Init: lazy P2P runs on the pair's communicator, eager on the default group's.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/torch/nccl-1456.ron")).unwrap();
    let comms = |init| loaded("n", &text, &TorchOptions { init: Some(init), ..Default::default() }).comms.len();
    assert!(comms(TorchInit::Lazy) > comms(TorchInit::Eager));
}

fn cuorder(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cuorder"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn check_takes_the_torch_profile_from_the_command_line() {
    let m = "examples/torch/megatron-batch-p2p.ron";
    let (code, out, _) = cuorder(&["check", m]);
    assert_eq!(code, 1, "{out}");
    let (code, out, err) = cuorder(&["check", m, "--torch-version", "since82450"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("PyTorch calls lowered with --torch-version since82450"), "{out}");
    let (code, out, _) = cuorder(&["check", m, "--torch-version", "before82450", "--torch-init", "eager"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("--torch-version before82450, --torch-init eager"), "{out}");
    let (code, out, _) = cuorder(&["check", "examples/torch/new-group-all-to-all.ron", "--torch-avoid-record-streams", "true", "--format", "json"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.trim_start().starts_with('{'), "{out}");
    // `run` and `time` take them too.
    let (code, out, err) = cuorder(&["run", m, "--torch-version", "since82450"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cuorder(&["time", m, "--torch-version", "since82450", "--torch-init", "eager"]);
    assert_eq!(code, 0, "{out}{err}");
    // A bad value is a usage error (2) that lists the values, not a panic.
    let (code, _, err) = cuorder(&["check", m, "--torch-version", "2.4"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("before82450, since82450"), "{err}");
    let (code, _, err) = cuorder(&["check", m, "--torch-avoid-record-streams", "yes"]);
    assert_eq!(code, 2, "{err}");
}
