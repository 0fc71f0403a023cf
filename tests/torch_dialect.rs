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
    assert!(err.contains("before82450, v2.4, since82450"), "{err}");
    let (code, _, err) = cuorder(&["check", m, "--torch-avoid-record-streams", "yes"]);
    assert_eq!(code, 2, "{err}");
}

/// `dist.all_gather(tensor_list, tensor)` on two ranks: rank r contributes `x` and gathers both parts into `o0`, `o1`;
/// `PEEK` is spliced in before the work's wait.
fn gather_list(peek: &str) -> String {
    format!(
        r#"Program(ranks: 2, torch: Torch(init: Eager),
    buffers: [Buffer("x", "1 MiB"), Buffer("o0", "1 MiB"), Buffer("o1", "1 MiB")],
    threads: [Thread("main", [InitProcessGroup, Compute("fill", writes: ["x"]),
        DistAllGatherList(tensor_list: ["o0", "o1"], tensor: "x", async_op: "g"),
        {peek}
        WorkWait("g"), Expect("o1", written_by: Memcpy, stream: "sL"), Compute("use", reads: ["o0", "o1"]), CudaSynchronize])])"#
    )
}

#[test]
fn all_gather_of_a_list_gathers_into_a_flat_temporary_and_copies_out_on_the_nccl_stream() {
    let p = loaded("ag", &gather_list(""), &TorchOptions::default());
    let ops = rank0_kinds(&p);
    // syncStream, ncclAllGather into the temporary, the post hook's two copies, the end event, the work's wait.
    let from = ops.iter().position(|k| *k == "Collective").expect("the all-gather") - 1;
    let lowered: Vec<&str> = ops[from..].iter().copied().filter(|k| *k != "other").collect();
    assert_eq!(lowered, ["Wait", "Collective", "Memcpy", "Memcpy", "Wait"], "{ops:?}");
    let ag = p.ranks[0].threads[0].ops.iter().find_map(|o| match &o.kind {
        OpKind::Collective { send, recv, .. } => Some((send.len, recv.len, recv.buf)),
        _ => None,
    });
    let (send, recv, flat) = ag.expect("an AllGather");
    assert_eq!((send, recv), (1 << 20, 2 << 20));
    assert_eq!(p.ranks[0].buffers[flat.index as usize].name, "torch.flat.0");
    assert_eq!(p.ranks[0].buffers[flat.index as usize].bytes, 2 << 20);
    assert_eq!(verdict(&p), Vec::<String>::new());
    // Reading an output before the wait races with its copy on the NCCL stream (the user's tensor, not the
    // temporary, is what the post hook writes).
    let early = cuorder::report::check(
        &loaded("early", &gather_list(r#"Compute("peek", reads: ["o1"]),"#), &TorchOptions::default()),
        &Profile::portable(),
        &Default::default(),
    );
    assert!(!kinds(&early).is_empty() && kinds(&early).iter().all(|k| k == "data race always"), "{:?}", kinds(&early));
    assert!(early.to_text().contains("memcpy"), "{}", early.to_text());
}

#[test]
fn all_gather_of_unequal_sizes_is_a_group_of_broadcasts() {
    // Rank r's part is (1 + r) MiB: ProcessGroupNCCL coalesces one _broadcast_oop per rank into one NCCL group.
    let text = r#"Program(ranks: 2, torch: Torch(init: Eager),
    buffers: [Buffer("x", "2 MiB"), Buffer("o0", "1 MiB"), Buffer("o1", "2 MiB")],
    threads: [Thread("main", [InitProcessGroup, Compute("fill", writes: ["x"]),
        DistAllGatherList(tensor_list: ["o0", "o1"], tensor: Slice("x", 0, "{1 + rank} MiB")),
        Compute("use", reads: ["o0", "o1"]), CudaSynchronize])])"#;
    let p = loaded("agv", text, &TorchOptions::default());
    let ops = rank0_kinds(&p);
    assert!(!ops.contains(&"Memcpy"), "no temporary: {ops:?}");
    let g = ops.iter().position(|k| *k == "GroupStart").expect("a group");
    assert_eq!(ops[g..g + 4], ["GroupStart", "Collective", "Collective", "GroupEnd"], "{ops:?}");
    let roots: Vec<String> = p.ranks[1].threads[0]
        .ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Collective { kind, send, recv, .. } => Some(format!("{kind:?} {} {}", send.len, recv.len)),
            _ => None,
        })
        .collect();
    // On rank 1: root 0 broadcasts 1 MiB into o0 (in place); rank 1 is root of its own 2 MiB part, read from x.
    assert_eq!(roots, ["Broadcast { root: 0 } 1048576 1048576", "Broadcast { root: 1 } 2097152 2097152"]);
    assert_eq!(verdict(&p), Vec::<String>::new());
}

#[test]
fn reduce_scatter_of_a_list_copies_into_a_flat_temporary_first() {
    let text = r#"Program(ranks: 2, torch: Torch(init: Eager),
    buffers: [Buffer("i0", "1 MiB"), Buffer("i1", "1 MiB"), Buffer("out", "1 MiB")],
    threads: [Thread("main", [InitProcessGroup, Compute("fill", writes: ["i0", "i1"]),
        DistReduceScatterList(output: "out", input_list: ["i0", "i1"], async_op: "r"),
        PEEK
        WorkWait("r"), Expect("out", written_by: ReduceScatter, stream: "sL"), CudaSynchronize])])"#;
    let p = loaded("rs", &text.replace("PEEK", ""), &TorchOptions::default());
    let ops = rank0_kinds(&p);
    let from = ops.iter().position(|k| *k == "Memcpy").expect("the pre hook's copies") - 1;
    let lowered: Vec<&str> = ops[from..].iter().copied().filter(|k| *k != "other").collect();
    assert_eq!(lowered, ["Wait", "Memcpy", "Memcpy", "Collective", "Wait"], "{ops:?}");
    assert_eq!(verdict(&p), Vec::<String>::new());
    // Writing an input before the wait races with the pre hook's copy of it on the NCCL stream.
    let early = loaded("early", &text.replace("PEEK", r#"Compute("overwrite", writes: ["i1"]),"#), &TorchOptions::default());
    let races = verdict(&early);
    assert!(!races.is_empty() && races.iter().all(|r| r == "data race always"), "{races:?}");
    // Unequal sizes: one Reduce per rank in one group, this rank's own part reduced into `out`.
    let unequal = text
        .replace("PEEK", "")
        .replace(r#"Buffer("i1", "1 MiB")"#, r#"Buffer("i1", "2 MiB")"#)
        .replace(r#"Buffer("out", "1 MiB")"#, r#"Buffer("out", "2 MiB")"#)
        .replace(r#"output: "out""#, r#"output: Slice("out", 0, "{1 + rank} MiB")"#)
        .replace("written_by: ReduceScatter", "written_by: Reduce");
    let p = loaded("rsv", &unequal, &TorchOptions::default());
    let ops = rank0_kinds(&p);
    assert!(!ops.contains(&"Memcpy") && ops.contains(&"GroupStart"), "{ops:?}");
    assert_eq!(verdict(&p), Vec::<String>::new());
}

#[test]
fn list_collective_errors_name_the_list_and_the_sizes() {
    // A list of the wrong length.
    let e = errors(&gather_list("").replace(r#"tensor_list: ["o0", "o1"]"#, r#"tensor_list: ["o0"]"#));
    assert_eq!(e[0], "4:40: `tensor_list` has 1 tensors; the group has 2 ranks");
    assert!(!e.iter().any(|e| e.contains("unknown work")), "the work still exists: {e:?}");
    // The own part differs from the input.
    let e = errors(&gather_list("").replace(r#"tensor: "x""#, r#"tensor: Slice("x", 0, "4 KiB")"#));
    // One error for both ranks, each rank's part named in rank order.
    assert_eq!(e[0], "4:62: ranks 0, 1: `tensor` is 4096 bytes, but this rank's own part `tensor_list[0]` / `tensor_list[1]` is 1048576 bytes", "{e:?}");
    // An unknown tensor: reported once, where it is written.
    let e = errors(&gather_list("").replace(r#"tensor_list: ["o0", "o1"]"#, r#"tensor_list: ["o0", "o2"]"#));
    assert_eq!(e[0], "4:47: unknown tensor `o2`", "{e:?}");
    assert_eq!(e.iter().filter(|e| e.contains("`o2`")).count(), 1, "{e:?}");
}

#[test]
fn avoiding_record_streams_leaves_all_gathers_outputs_to_the_user() {
    // With TORCH_NCCL_AVOID_RECORD_STREAMS ProcessGroupNCCL::allgather neither records nor stashes the list's
    // outputs ("User-facing outputTensors should be held by the user until after waiting on work_"): deleting one
    // before the wait hands its block to the next allocation on the same stream while the copy into it may still
    // run on the NCCL stream. With record_stream the block is held back: clean.
    let text = r#"Program(ranks: 2, torch: Torch(init: Eager),
    buffers: [Buffer("x", "1 MiB"), Pooled("o0", "1 MiB"), Pooled("o1", "1 MiB"), Pooled("u", "1 MiB")],
    threads: [Thread("main", [InitProcessGroup, Compute("fill", writes: ["x"]), Empty("o0"), Empty("o1"),
        DistAllGatherList(tensor_list: ["o0", "o1"], tensor: "x", async_op: "g"),
        Del("o1"), Empty("u"), Compute("reuse", writes: ["u"]),
        WorkWait("g"), CudaSynchronize])])"#;
    assert_eq!(verdict(&loaded("record", text, &RECORD)), Vec::<String>::new());
    let r = cuorder::report::check(&loaded("avoid", text, &AVOID), &Profile::portable(), &Default::default());
    assert!(kinds(&r).iter().any(|k| k.starts_with("data race")), "{:?}", kinds(&r));
    assert!(r.to_text().contains("the caching allocator handed o1's freed block to u"), "{}", r.to_text());
}

/// From a new user's review: a host (pageable) tensor in a list collective loaded (its parts move by Memcpy) although
/// PyTorch refuses non-CUDA tensors; empty tensors gave an internal error about the temporary; two list collectives
/// in a row took past 800,000 states (the temporary's Alloc/Free multiplied them; it is a fixed device buffer now).
#[test]
fn list_collectives_refuse_host_tensors_take_empty_ones_and_stay_cheap() {
    let host = gather_list("").replace(r#"Buffer("o1", "1 MiB")"#, r#"Buffer("o1", "1 MiB", space: PageableHost)"#);
    let e = errors(&host);
    assert!(e[0].starts_with("4:47: `o1` is host memory; dist.all_gather takes CUDA tensors"), "{e:?}");
    let empty = r#"Program(ranks: 2, torch: Torch(init: Eager), buffers: [Buffer("g", "4 KiB"), Buffer("t", "4 KiB")],
        threads: [Thread("main", [InitProcessGroup,
            DistAllGatherList(tensor_list: [Slice("g", 0, 0), Slice("g", 0, 0)], tensor: Slice("t", 0, 0)), CudaSynchronize])])"#;
    assert_eq!(verdict(&loaded("empty", empty, &TorchOptions::default())), Vec::<String>::new());
    let twice = r#"Program(ranks: 4, torch: Torch(init: Eager),
        buffers: [Buffer("i0", "1 MiB"), Buffer("i1", "1 MiB"), Buffer("i2", "1 MiB"), Buffer("i3", "1 MiB"), Buffer("out", "1 MiB")],
        threads: [Thread("main", [InitProcessGroup, Compute("fill", writes: ["i0", "i1", "i2", "i3"]),
            DistReduceScatterList(output: "out", input_list: ["i0", "i1", "i2", "i3"], async_op: "a"), WorkWait("a"),
            DistReduceScatterList(output: "out", input_list: ["i0", "i1", "i2", "i3"], async_op: "b"), WorkWait("b"),
            CudaSynchronize])])"#;
    let r = cuorder::report::check(&loaded("twice", twice, &TorchOptions::default()), &Profile::portable(), &Default::default());
    assert!(r.findings.is_empty() && r.limit_hit.is_none(), "{}", r.to_text());
    assert!(r.states < 50_000, "{} states", r.states);
}

/// From a new user's review: a stream's name where a tensor is expected said only "unknown tensor", and `x@1`
/// suggested `x`; a bad kernel or host-function duration also made a correct `Expect` of what it writes an error.
#[test]
fn a_name_of_another_kind_is_said_and_a_bad_duration_does_not_cascade() {
    let text = gather_list("").replace(r#"tensor: "x""#, r#"tensor: "side""#).replace("buffers: [", r#"streams: [Stream("side", NonBlocking)], buffers: ["#);
    let e = match load("bad", &text) {
        Ok(_) => panic!("loads"),
        Err(d) => d,
    };
    assert!(e[0].message.contains("unknown tensor `side`") && e[0].help.as_deref() == Some("`side` is a stream, not a tensor"), "{e:?}");
    let e = errors(r#"Program(ranks: 1, streams: [Stream("s", NonBlocking)], buffers: [Buffer("h", "4 KiB", space: PinnedHost), Buffer("d", "4 KiB")],
        threads: [Thread("main", [HostFunc("log", stream: "s", writes: ["h"], duration: "5 parsecs"),
            Kernel("k", stream: "s", writes: ["d"], duration: "3 lightyears"), StreamSync("s"),
            Expect("h", written_by: HostFunc("log")), Expect("d", written_by: Kernel("k"), stream: "s")])])"#);
    assert_eq!(e.len(), 2, "only the two durations: {e:?}");
    assert!(e.iter().all(|e| e.contains("invalid duration")), "{e:?}");
    // A buffer whose size does not parse is reported where it is declared, not again as an unknown tensor.
    let e = errors(r#"Program(ranks: 2, torch: Torch(init: Eager), buffers: [Buffer("shard", "{rank + 1} MiB"), Buffer("g0", "1 MiB"), Buffer("g1", "1 MiB")],
        threads: [Thread("main", [InitProcessGroup, DistAllGatherList(tensor_list: ["g0", "g1"], tensor: "shard"), CudaSynchronize])])"#);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("invalid size"), "{e:?}");
}

/// Issue 30, item 2: every ProcessGroupNCCL has its own NCCL stream (`ncclStreams_`, measured on PyTorch 2.11: the
/// default group and two `new_group`s record their work events on three streams). A data-parallel all-reduce on a
/// `new_group` ran on the default group's stream `nccl`, behind which the default group's all-reduce and its
/// `wait()` then ordered it: clean, where the real job reads the gradient while the group's all-reduce may run.
#[test]
fn new_group_collectives_shared_the_default_groups_stream() {
    let text = r#"Program(ranks: 2, torch: Torch(init: Eager),
    buffers: [Buffer("g", "4 MiB"), Buffer("h", "4 MiB")],
    threads: [Thread("main", [InitProcessGroup, NewGroup("dp", [0, 1]), NewGroup("tp", [0, 1]),
        DistAllReduce("g", group: "dp", async_op: "a"),
        DistAllReduce("h", async_op: "b"),
        WorkWait("b"),
        Compute("use", reads: ["g"]),
        WorkWait("a"),
        DistAllReduce("h", group: "tp"),
        CudaSynchronize])])"#;
    let p = loaded("groups", text, &TorchOptions::default());
    // One stream per group: the default group's `nccl` and the groups' own, each collective on its group's.
    let streams: Vec<String> = p.ranks[0].threads[0]
        .ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Collective { stream, .. } => Some(p.stream_label(*stream, 0)),
            _ => None,
        })
        .collect();
    assert_eq!(streams, ["nccl.group.dp", "nccl", "nccl.group.tp"]);
    let r = cuorder::report::check(&p, &Profile::portable(), &Default::default());
    let races: Vec<String> = kinds(&r).into_iter().filter(|k| k.starts_with("data race")).collect();
    assert_eq!(races, ["data race always"; 2], "{}", r.to_text());
    assert!(r.to_text().contains("all_reduce(g -> g, nccl.group.dp, torch.group.dp)"), "{}", r.to_text());
    // Waiting for the group's own work first orders the read: no race.
    let fixed = text.replace(r#"WorkWait("b"),"#, r#"WorkWait("b"), WorkWait("a"),"#);
    let r = cuorder::report::check(&loaded("fixed", &fixed, &TorchOptions::default()), &Profile::portable(), &Default::default());
    assert!(!kinds(&r).iter().any(|k| k.starts_with("data race")), "{}", r.to_text());
}

/// Issue 30, item 5: `works.append(dist.isend(..))` in a loop, then `for w in works: w.wait()`. A work named
/// `"w{i}"` inside `For` was stored under the written name, so `WorkWait("w0")` after the loop was "unknown work";
/// and sharing the call site's end event would have bound the wait of iteration 0's work to the last iteration's
/// record.
#[test]
fn work_names_made_in_a_for_loop_were_unknown_after_it() {
    let text = r#"Program(ranks: 2, torch: Torch(init: Eager),
    buffers: [Buffer("x", "4 MiB"), Buffer("y", "4 MiB")],
    threads: [Thread("main", [InitProcessGroup,
        If(rank == 0, then: [
            For(i, 0..2, [Isend(Slice("x", "{i} MiB", "1 MiB"), dst: Rank(1), work: "w{i}")]),
            For(i, 0..2, [WorkWait("w{i}")]),
        ], else: [
            For(i, 0..2, [Irecv(Slice("y", "{i} MiB", "1 MiB"), src: Rank(0), work: "w{i}")]),
            WorkWait("WAITED"),
            Compute("use", reads: [Slice("y", "1 MiB", "1 MiB")]),
            For(i, 0..2, [WorkWait("w{i}")]),
        ]),
        CudaSynchronize])])"#;
    // Waiting for the second recv's work orders the read of its part; waiting for the first's does not.
    let p = loaded("w1", &text.replace("WAITED", "w1"), &TorchOptions::default());
    assert_eq!(verdict(&p), Vec::<String>::new());
    let p = loaded("w0", &text.replace("WAITED", "w0"), &TorchOptions::default());
    assert_eq!(verdict(&p), ["data race always"]);
    // A name that does not interpolate is an error at its place, and an unknown one still says what exists.
    let e = errors(&text.replace("WAITED", "w{j}"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("9:22: rank 1: unknown variable"), "{e:?}");
    let e = errors(&text.replace("WAITED", "w2"));
    assert!(e[0].starts_with("9:22: rank 1: unknown work `w2`"), "{e:?}");
}

/// Issue 30, item 5: freeing a tensor's storage while a work still holds the tensor (FSDP's `_free_storage`:
/// `t.untyped_storage().resize_(0)` after the collective was issued) could not be said. `resize_(0)` drops the
/// storage's block at once, whatever references the tensor: record_stream still holds the block back until the send
/// has ended, but TORCH_NCCL_AVOID_RECORD_STREAMS's stash, unlike for `del t`, protects nothing.
#[test]
fn freeing_the_storage_of_a_tensor_a_work_holds_could_not_be_said() {
    let text = r#"Program(ranks: 2, torch: Torch(init: Eager, avoid_record_streams: true),
    buffers: [Pooled("t", "1 MiB"), Pooled("u", "1 MiB"), Buffer("r", "1 MiB")],
    threads: [Thread("main", [InitProcessGroup,
        If(rank == 0, then: [Empty("t"), Compute("fill", writes: ["t"]), Isend("t", dst: Rank(1), work: "w"), FreeStorage("t"),
                             Empty("u"), Compute("reuse", writes: ["u"]), WorkWait("w"), FreeStorage("t"), Del("t")],
                      else: [DistRecv("r", src: Rank(0))]),
        CudaSynchronize])])"#;
    let stash = loaded("stash", text, &TorchOptions::default());
    // One Free, at the FreeStorage: neither the wait (releasing the stash), the second FreeStorage (of an empty
    // storage) nor `del t` frees the block again.
    let ops = rank0_kinds(&stash);
    assert_eq!(ops.iter().filter(|k| **k == "Free").count(), 1, "{ops:?}");
    assert!(ops.iter().position(|k| *k == "Free") < ops.iter().rposition(|k| *k == "Alloc"), "{ops:?}");
    let r = cuorder::report::check(&stash, &Profile::portable(), &Default::default());
    assert_eq!(kinds(&r), ["data race sometimes"], "{}", r.to_text());
    assert!(r.to_text().contains("the caching allocator handed t's freed block to u"), "{}", r.to_text());
    // record_stream keeps the block from reuse until the send has ended.
    assert_eq!(verdict(&loaded("record", text, &RECORD)), Vec::<String>::new());
    // `del t` first: the storage is out of reach.
    let e = errors(&text.replace(r#"FreeStorage("t"),
                             Empty("u")"#, r#"Del("t"), FreeStorage("t"),
                             Empty("u")"#));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("4:133: rank 0: `t` was deleted (`del t`); its storage is no longer reachable"), "{e:?}");
}

/// Issue 30, item 5: the default group's communicator existed from the start in the model. Initialised lazily (no
/// `device_id`), ProcessGroupNCCL creates it at the rank's first call that needs it (`getNCCLComm`:
/// ncclCommInitRankConfig over every rank of the group, N8); `batch_isend_irecv`'s docs: "if this API is the first
/// collective call in the group ..., all ranks of the group must participate". Two ranks of three exchanging with
/// `batch_isend_irecv` while the third makes no call on the group hang in that creation; eagerly initialised
/// (`init_process_group(device_id=)`), the communicator exists and the exchange completes.
#[test]
fn the_default_groups_communicator_existed_before_its_first_collective() {
    let text = r#"Program(ranks: 3,
    buffers: [Buffer("a", "1 MiB"), Buffer("b", "1 MiB")],
    threads: [Thread("main", [InitProcessGroup,
        OnRanks([0, 1], [BatchIsendIrecv([P2POp(Isend, "a", Rank(1 - rank)), P2POp(Irecv, "b", Rank(1 - rank))], works: "r"),
                         WorkWait("r")]),
        CudaSynchronize])])"#;
    let lazy = loaded("lazy", text, &TorchOptions::default());
    let first = lazy.ranks[0].threads[0].ops.iter().find(|o| matches!(o.kind, OpKind::CommInit { .. }));
    assert!(first.is_some(), "the first batch creates `world`");
    assert!(!lazy.ranks[2].threads[0].ops.iter().any(|o| matches!(o.kind, OpKind::CommInit { .. })), "rank 2 never uses it");
    let r = cuorder::report::check(&lazy, &Profile::portable(), &Default::default());
    assert_eq!(kinds(&r), ["deadlock always"], "{}", r.to_text());
    assert!(r.to_text().contains("r2 never calls comm_init(world)"), "{}", r.to_text());
    let eager = TorchOptions { init: Some(TorchInit::Eager), ..Default::default() };
    assert_eq!(verdict(&loaded("eager", text, &eager)), Vec::<String>::new());
    // Every rank's first call creates it once; dist.destroy_process_group() finalizes it only where it was created.
    let text = r#"Program(ranks: 2, buffers: [Buffer("x", "1 MiB")],
        threads: [Thread("main", [InitProcessGroup, DistAllReduce("x"), DistBarrier, DestroyProcessGroup])])"#;
    let p = loaded("twice", text, &TorchOptions::default());
    let inits = p.ranks[1].threads[0].ops.iter().filter(|o| matches!(o.kind, OpKind::CommInit { .. })).count();
    assert_eq!(inits, 1);
    assert_eq!(verdict(&p), Vec::<String>::new());
}

/// Issue 30, item 5: `new_group` as PyTorch 2.4 made it could not be said. With an eagerly initialised default
/// group, 2.4's `_new_process_group_helper` splits the group from the default group's communicator: every rank of
/// the default group takes part (ncclCommSplit), the non-members at `new_group` (`perform_nocolor_split`), the
/// members only at their first collective on the group (`getNCCLComm` with `split_from`; `new_group` passed no
/// `device_id` before PR 129284). A non-member that calls `dist.barrier()` after `new_group` waits in the split for
/// members that wait in the barrier for it: a hang in 2.4 that later releases (every rank splits at the call) do not
/// have.
#[test]
fn new_group_split_as_pytorch_2_4_made_it_could_not_be_said() {
    let text = r#"Program(ranks: 3, torch: Torch(init: Eager),
    buffers: [Buffer("x", "1 MiB")],
    threads: [Thread("main", [InitProcessGroup,
        NewGroup("g", [0, 1]),
        DistBarrier,
        OnRanks([0, 1], [DistAllReduce("x", group: "g")]),
        CudaSynchronize])])"#;
    assert_eq!(verdict(&loaded("later", text, &TorchOptions::default())), Vec::<String>::new());
    let v24 = TorchOptions { version: Some(TorchVersion::V2_4), ..Default::default() };
    let p = loaded("v2.4", text, &v24);
    // The members split at the all-reduce, after the barrier; rank 2 at new_group.
    let split_at = |r: usize| {
        p.ranks[r].threads[0].ops.iter().position(|o| matches!(o.kind, OpKind::CommSplit { .. })).expect("a split")
    };
    let barrier = p.ranks[0].threads[0].ops.iter().position(|o| matches!(o.kind, OpKind::Collective { .. })).unwrap();
    assert!(split_at(0) > barrier && split_at(2) == 0, "{} {barrier} {}", split_at(0), split_at(2));
    let r = cuorder::report::check(&p, &Profile::portable(), &Default::default());
    // A hang with the barrier's collective connections made lazily (in their set-up) and one with them made at
    // init (on the device): portable explores both (issue 30, item 3); rank 2 waits in its split in each.
    assert_eq!(kinds(&r), ["deadlock always", "deadlock always"], "{}", r.to_text());
    for f in &r.findings {
        assert!(f.text.contains("r2 main is blocked in #0 comm_split(world, no color) (line 4:9)"), "{}", f.text);
        // The fix hint named comm_init where the cycle goes through a split (issue 30's note, item 5).
        assert!(!f.text.contains("must call comm_init"), "a fix named comm_init for a split: {}", f.text);
        assert!(f.text.contains("fix: every member of the parent communicator must call comm_split"), "{}", f.text);
    }
    // The members' first collective on the group before the barrier: the split completes, and so does the program.
    let fixed = text.replace(
        "DistBarrier,\n        OnRanks([0, 1], [DistAllReduce(\"x\", group: \"g\")]),",
        "OnRanks([0, 1], [DistAllReduce(\"x\", group: \"g\")]),\n        DistBarrier,",
    );
    assert_ne!(fixed, text);
    assert_eq!(verdict(&loaded("fixed", &fixed, &v24)), Vec::<String>::new());
    // The command line takes the version as `v2.4`.
    let path = std::env::temp_dir().join(format!("cuorder-new-group-2-4-{}.ron", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let (code, out, err) = cuorder(&["check", path.to_str().unwrap(), "--torch-version", "v2.4"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("deadlock"), "{out}");
}
