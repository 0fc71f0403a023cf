//! Unit tests of the surface format: parsing, expansion, resolution and validation.

use super::*;
use crate::program::*;

const ALL_OPS: &str = include_str!("testdata/all_ops.ron");

fn ok(text: &str) -> Program {
    load("t", text).unwrap_or_else(|ds| {
        panic!("unexpected errors:\n{}", ds.iter().map(|d| format!("{d} {:?}", d.help)).collect::<Vec<_>>().join("\n"))
    })
}

/// Every diagnostic as `line:column: message [help]`, one per entry.
fn errors(text: &str) -> Vec<String> {
    match load("t", text) {
        Ok(_) => panic!("expected errors, the program loaded"),
        Err(ds) => ds
            .iter()
            .map(|d| match &d.help {
                Some(h) => format!("{}:{}: {} [{h}]", d.line, d.column, d.message),
                None => format!("{}:{}: {}", d.line, d.column, d.message),
            })
            .collect(),
    }
}

/// A 2-rank program (streams s0, s1; events e, f; device buffers x 4 KiB, y 8 KiB; pinned p 4 KiB; pageable h 4 KiB;
/// pooled out; comm world) whose one SPMD thread runs `ops` (written from line 3 on).
fn prog(ops: &str) -> String {
    format!(
        "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking), Stream(\"s1\", Blocking)], events: [\"e\", \"f\"],\n\
         buffers: [Buffer(\"x\", \"4 KiB\"), Buffer(\"y\", \"8 KiB\"), Buffer(\"p\", \"4 KiB\", space: PinnedHost), Buffer(\"h\", 4096, space: PageableHost), Pooled(\"out\", \"1 MiB\")], comms: [Comm(\"world\")], threads: [Thread(\"main\", [\n\
         {ops}\n])])"
    )
}

fn errs(ops: &str) -> Vec<String> {
    errors(&prog(ops))
}

/// Asserts that exactly one error was reported and it contains every needle.
#[track_caller]
fn one_error(ops: &str, needles: &[&str]) {
    let e = errs(ops);
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    for n in needles {
        assert!(e[0].contains(n), "`{}` does not contain `{n}`", e[0]);
    }
}

fn ops_of(p: &Program, rank: usize, thread: usize) -> Vec<&OpKind> {
    p.ranks[rank].threads[thread].ops.iter().map(|o| &o.kind).collect()
}

#[test]
fn all_ops_program_loads_with_its_structure() {
    let p = ok(ALL_OPS);
    assert_eq!(p.name, "t");
    assert_eq!(p.ranks.len(), 4);
    let names: Vec<&str> = p.ranks[0].streams.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["sL", "s0", "sb", "sN", "sPT.main", "sPT.helper"]);
    let kinds: Vec<StreamKind> = p.ranks[0].streams.iter().map(|s| s.kind).collect();
    use StreamKind::*;
    assert_eq!(kinds, [LegacyDefault, NonBlocking, Blocking, NonBlocking, PerThreadDefault, PerThreadDefault]);
    assert_eq!(p.ranks[1].streams.len(), 5);
    assert_eq!(p.ranks[0].threads.len(), 2);
    assert_eq!(p.ranks[3].threads.len(), 1);
    assert_eq!(p.ranks[2].events, ["e", "eW"]);
    let b = &p.ranks[0].buffers;
    assert_eq!((b[0].bytes, b[0].space, b[0].pooled), (2 << 30, MemSpace::Device, false));
    assert_eq!((b[5].bytes, b[5].space), (4096, MemSpace::PinnedHost));
    assert_eq!(b[6].space, MemSpace::PageableHost);
    assert!(b[7].pooled && b[7].space == MemSpace::Device);
    assert_eq!(p.comms[0], Comm { name: "world".into(), members: vec![0, 1, 2, 3], explicit_init: false, nonblocking: false, watchdog_ns: None });
    assert_eq!(p.comms[1], Comm { name: "pair01".into(), members: vec![0, 1], explicit_init: true, nonblocking: false, watchdog_ns: None });
    assert_eq!(p.barriers.len(), 1);
    assert_eq!(p.barriers[0].participants, vec![(0, 0), (0, 1), (1, 0), (2, 0), (3, 0)]);
    assert_eq!(ops_of(&p, 0, 0).len(), 39);
    assert_eq!(ops_of(&p, 1, 0).len(), 39);
    assert_eq!(ops_of(&p, 2, 0).len(), 37);
    assert_eq!(ops_of(&p, 0, 1).len(), 3);
    assert_eq!(p.thread_count(), 5);
}

#[test]
fn all_ops_resolve_to_the_right_references() {
    let p = ok(ALL_OPS);
    let r0 = ops_of(&p, 0, 0);
    let x = BufRef { rank: 0, index: 0 };
    assert_eq!(
        *r0[0],
        OpKind::Kernel {
            stream: StreamRef { rank: 0, index: 1 },
            name: "fwd".into(),
            reads: vec![BufRange { buf: BufRef { rank: 0, index: 3 }, offset: 0, len: 1024 }],
            writes: vec![BufRange { buf: x, offset: 0, len: 1 << 20 }],
            duration_ns: 1_000_000,
        }
    );
    // sPT of thread 0 of rank 0: after sL and 3 declared streams.
    assert!(matches!(r0[1], OpKind::Kernel { stream: StreamRef { rank: 0, index: 4 }, duration_ns: DEFAULT_KERNEL_NS, .. }));
    assert!(matches!(r0[3], OpKind::Memset { stream: None, .. }));
    assert!(matches!(r0[5], OpKind::Memcpy { stream: None, dst: BufRange { len: 1024, .. }, .. }));
    assert_eq!(*r0[6], OpKind::EventRecord { event: EventRef { rank: 0, index: 0 }, stream: StreamRef { rank: 0, index: 1 } });
    assert_eq!(*r0[11], OpKind::StreamQuery { stream: StreamRef { rank: 0, index: 0 } });
    assert_eq!(*r0[12], OpKind::DeviceSynchronize { rank: 0 });
    assert_eq!(*r0[13], OpKind::HostSleep { ns: 10_000 });
    assert!(matches!(r0[15], OpKind::HostAccess { write: true, .. }));
    assert_eq!(*r0[17], OpKind::GroupStart);
    assert!(matches!(r0[18], OpKind::Send { comm: CommId(0), peer: 1, .. }));
    assert!(matches!(r0[19], OpKind::Recv { comm: CommId(0), peer: 3, .. }));
    assert_eq!(*r0[20], OpKind::GroupEnd);
    assert!(matches!(r0[27], OpKind::Collective { kind: CollectiveKind::Broadcast { root: 0 }, .. }));
    assert!(matches!(r0[28], OpKind::Collective { kind: CollectiveKind::AllGather, send: BufRange { len: 1024, .. }, recv: BufRange { len: 4096, .. }, .. }));
    assert_eq!(*r0[33], OpKind::CommInit { comm: CommId(1) });
    assert!(matches!(r0[34], OpKind::Send { comm: CommId(1), peer: 1, .. }));
    assert!(matches!(r0[35], OpKind::Kernel { ref name, .. } if name == "even"));
    // Parity peers: rank 1 has an odd position in `world`, so it sends to Prev = 0 and receives from Prev.
    let r1 = ops_of(&p, 1, 0);
    assert!(matches!(r1[22], OpKind::Send { peer: 0, .. }));
    assert!(matches!(r1[18], OpKind::Send { peer: 2, .. }));
    assert!(matches!(r1[34], OpKind::Recv { comm: CommId(1), peer: 0, .. }));
    assert!(matches!(r1[35], OpKind::Kernel { ref name, .. } if name == "odd"));
    // The helper thread: its own per-thread stream, and a stream of rank 1 by qualification.
    let h = ops_of(&p, 0, 1);
    assert!(matches!(h[1], OpKind::Kernel { stream: StreamRef { rank: 0, index: 5 }, .. }));
    assert_eq!(*h[2], OpKind::StreamSynchronize { stream: StreamRef { rank: 1, index: 1 } });
}

#[test]
fn origins_point_at_the_op_as_written() {
    let p = ok(ALL_OPS);
    let ops = &p.ranks[0].threads[0].ops;
    let at = |needle: &str| {
        let offset = ALL_OPS.find(needle).unwrap();
        let (line, column) = diagnostic::line_col(ALL_OPS, offset);
        Origin { offset: Some(offset), line: Some(line), column: Some(column) }
    };
    assert_eq!(ops[0].origin, at("Kernel(\"fwd\""));
    assert_eq!(ops[17].origin, at("Group(["), "GroupStart of Group sugar");
    assert_eq!(ops[20].origin, at("Group(["), "GroupEnd of Group sugar");
    assert_eq!(ops[18].origin, at("Send(to: Next"));
    assert_eq!(ops[21].origin, at("GroupStart,"));
    let step = at("Kernel(\"step\"");
    assert!(ops[36..39].iter().all(|o| o.origin == step), "every repetition keeps the inner op's position");
    assert_eq!(ops[35].origin, at("Kernel(\"even\""));
    assert_eq!(p.ranks[1].threads[0].ops[35].origin, at("Kernel(\"odd\""));
}

#[test]
fn defaults_and_sugar() {
    let p = ok(&prog("Group([Send(to: Next, buf: \"x\", stream: \"s0\"), Recv(from: Prev, buf: \"x\", stream: \"s0\")]), Repeat(0, [DeviceSync])"));
    let ops = ops_of(&p, 0, 0);
    assert_eq!(ops.len(), 4, "Repeat(0, ..) expands to nothing");
    assert!(matches!(ops[1], OpKind::Send { comm: CommId(0), .. }), "the only communicator is the default");
}

#[test]
fn sizes_and_durations_in_all_forms() {
    let p = ok(&prog(
        "Kernel(\"k\", stream: \"s0\", reads: [Slice(\"x\", \"1 KiB\", 1024), Slice(\"y\", 0, \"0.5 KiB\")], duration: 250), Sleep(\"1.5 ms\")",
    ));
    let ops = ops_of(&p, 1, 0);
    let OpKind::Kernel { reads, duration_ns, .. } = ops[0] else { panic!() };
    assert_eq!((reads[0].offset, reads[0].len, reads[1].len, *duration_ns), (1024, 1024, 512, 250));
    assert_eq!(*ops[1], OpKind::HostSleep { ns: 1_500_000 });
}

#[test]
fn ranks_out_of_range() {
    let e = errors("Program(ranks: 0, threads: [])");
    assert_eq!(e, ["1:16: a program has 1 to 4096 ranks, not 0 [the limit is MAX_RANKS = 4096]"]);
    let e = errors("Program(ranks: 4097, threads: [])");
    assert!(e[0].contains("not 4097"));
    let p = ok("Program(ranks: 4096, comms: [Comm(\"world\")], buffers: [Buffer(\"x\", 4)], streams: [Stream(\"s\", NonBlocking)], threads: [Thread(\"main\", [Group([Send(to: Next, buf: \"x\", stream: \"s\"), Recv(from: Prev, buf: \"x\", stream: \"s\")])])])");
    assert_eq!(p.ranks.len(), 4096);
}

/// Regression (issue 33): a name declared composed (NFC, "é" as U+00E9) and used decomposed (NFD, e and U+0301)
/// was "unknown buffer `é`" next to "known buffers: é". Names are compared as written; the help says they differ
/// only in Unicode normalisation.
#[test]
fn unknown_name_differing_only_in_unicode_normalisation_was_unexplained() {
    let (nfc, nfd) = ("caf\u{e9}", "cafe\u{301}");
    let text = format!(
        "Program(ranks: 1, streams: [Stream(\"s0\", NonBlocking)], buffers: [Buffer(\"{nfc}\", \"1 KiB\")], \
         threads: [Thread(\"m\", [Kernel(\"k\", stream: \"s0\", writes: [\"{nfd}\"])])])"
    );
    let all = errors(&text).join("\n");
    assert!(all.contains(&format!("unknown buffer `{nfd}`")), "{all}");
    assert!(all.contains("differ only in Unicode normalisation"), "{all}");
    assert!(!all.contains("known buffers:"), "{all}");
}

#[test]
fn unknown_names_with_suggestions() {
    one_error("Kernel(\"k\", stream: \"s2\")", &["3:21: unknown stream `s2`", "did you mean `s0`?"]);
    one_error("Kernel(\"k\", stream: \"compute\")", &["unknown stream `compute`", "known streams: s0, s1, sL, sPT"]);
    one_error("Kernel(\"k\", stream: \"x\")", &["unknown stream `x`", "`x` is a buffer, not a stream"]);
    one_error("Record(\"ee\", stream: \"s0\")", &["unknown event `ee`", "did you mean `e`?"]);
    one_error("HostRead(\"q\")", &["unknown buffer `q`", "known buffers: h, out, p, x, y"]);
    one_error("HostRead(\"xx\")", &["unknown buffer `xx`", "did you mean `x`?"]);
    one_error("AllReduce(buf: \"x\", stream: \"s0\", comm: \"wrld\")", &["unknown communicator `wrld`", "did you mean `world`?"]);
}

#[test]
fn unknown_names_in_spmd_are_reported_once_without_rank() {
    let e = errs("Kernel(\"k\", stream: \"s2\"), Repeat(5, [StreamSync(\"s2\")])");
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e.iter().all(|m| !m.contains("rank")), "{e:#?}");
}

#[test]
fn rank_specific_errors_say_which_rank() {
    let e = errs("OnRanks([1], [HostRead(\"x\")])");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("3:24: rank 1: HostRead of device memory `x`"), "{e:?}");
}

#[test]
fn qualified_names() {
    ok(&prog("Kernel(\"k\", stream: \"s0@1\", writes: [\"x@1\"]), Wait(\"e@1\", stream: \"s0\"), StreamSync(\"sL@1\")"));
    one_error("StreamSync(\"s0@5\")", &["`s0@5` names rank 5, which does not exist", "0 to 1"]);
    one_error("StreamSync(\"s0@one\")", &["invalid rank qualifier in `s0@one`"]);
    one_error("StreamSync(\"sPT@1\")", &["cannot be qualified"]);
}

#[test]
fn duplicate_and_reserved_names() {
    let e = errors(
        "Program(ranks: 1, streams: [Stream(\"s\", Blocking), Stream(\"s\", NonBlocking), Stream(\"sL\", Blocking), Stream(\"a@1\", Blocking)],\n\
         events: [\"e\", \"e\"], buffers: [Buffer(\"x\", 1), Pooled(\"x\", 2)], comms: [Comm(\"c\"), Comm(\"c\")],\n\
         threads: [Thread(\"t\", []), Thread(\"t\", [])])",
    );
    let all = e.join("\n");
    for needle in [
        "duplicate stream name `s`",
        "stream name `sL` is reserved",
        "stream name `a@1` contains `@`",
        "duplicate event name `e`",
        "duplicate buffer name `x`",
        "duplicate communicator name `c`",
        "duplicate thread name `t` on rank 0",
    ] {
        assert!(all.contains(needle), "missing `{needle}` in\n{all}");
    }
    assert_eq!(e.len(), 7, "{all}");
    let ds = load("t", "Program(ranks: 1, events: [\"e\", \"e\"], threads: [])").unwrap_err();
    assert_eq!(ds[0].related.len(), 1, "points at the first declaration");
    assert_eq!(ds[0].related[0].column, 28);
}

#[test]
fn declaration_errors() {
    let e = errors(
        "Program(ranks: 2, buffers: [Buffer(\"z\", 0), Buffer(\"w\", \"3 parsecs\")], comms: [Comm(\"c\", members: [0, 2, 0]), Comm(\"d\", members: [])],\n\
         threads: [Thread(\"t\", ranks: [3], ops: [])])",
    );
    let all = e.join("\n");
    for needle in [
        "buffer `z` has size 0",
        "invalid size `3 parsecs`: unknown unit `parsecs`",
        "1:103: rank 2 does not exist",
        "rank 0 is listed twice in `c`",
        "communicator `d` has no members",
        "2:31: rank 3 does not exist",
    ] {
        assert!(all.contains(needle), "missing `{needle}` in\n{all}");
    }
}

#[test]
fn slices() {
    one_error("HostRead(Slice(\"p\", \"3 KiB\", \"2 KiB\"))", &["slice of 2048 bytes at offset 3072 is out of bounds of `p` (4096 bytes)"]);
    one_error("HostRead(Slice(\"p\", 0, \"1 parsec\"))", &["3:24: invalid size `1 parsec`"]);
    one_error("HostRead(Slise(\"p\", 0, 1))", &["3:10: expected a buffer name or `Slice(\"name\", offset, len)`, found `Slise(..)`"]);
    one_error("HostRead(Slice(\"p\", 18446744073709551615, 2))", &["out of bounds"]);
}

#[test]
fn memcpy_lengths_and_spaces() {
    one_error("Memcpy(dst: \"x\", src: \"y\", stream: \"s0\")", &["3:1: Memcpy lengths differ: dst is 4096 bytes, src is 8192 bytes"]);
    ok(&prog("Memcpy(dst: \"x\", src: Slice(\"y\", 0, \"4 KiB\")), Memcpy(dst: \"h\", src: \"x\", stream: \"s1\")"));
    one_error("Memcpy(dst: \"x@1\", src: \"p\", stream: \"s0\")", &["rank 0: `x@1` is device memory of rank 1, but the copy on rank 0 can only touch device memory of rank 0"]);
    // Peer access within one process: rank 0's thread copies on device 1 into device 0's memory.
    ok(&prog("OnRanks([0], [Memcpy(dst: \"x\", src: \"x@1\", stream: \"s0@1\")])"));
    one_error("OnRanks([0], [Memcpy(dst: \"x\", src: \"h@1\", stream: \"s0@1\")])", &["`h@1` is host memory of rank 1's process, not of this thread's (rank 0)"]);
}

#[test]
fn memory_space_rules() {
    one_error("HostWrite(\"y\")", &["HostWrite of device memory `y`"]);
    one_error("HostRead(\"p@1\")", &["`p@1` is host memory of rank 1's process"]);
    one_error("Kernel(\"k\", stream: \"s0\", reads: [\"h\"])", &["a kernel cannot access pageable host memory `h`"]);
    one_error("Kernel(\"k\", stream: \"s0\", writes: [\"x@1\"])", &["`x@1` is device memory of rank 1, but a kernel on rank 0 can only touch device memory of rank 0"]);
    one_error("OnRanks([0], [Kernel(\"k\", stream: \"s0@1\", writes: [\"y@2\"])])", &["`y@2` names rank 2, which does not exist"]);
    let three = "Program(ranks: 3, streams: [Stream(\"s\", NonBlocking)], buffers: [Buffer(\"x\", 8)], threads: [Thread(\"t\", ranks: [0], ops: [\n";
    let e = errors(&format!("{three}Kernel(\"k\", stream: \"s@1\", writes: [\"x@2\"])])])"));
    assert_eq!(e, ["2:37: `x@2` is device memory of rank 2, but a kernel on rank 1 can only touch device memory of rank 1 (its device) or rank 0 (the calling process's device) [use the buffer of rank 1 (`x@1`), or a stream of rank 2]"]);
    // Peer access within one process: a kernel on device 1 reads device 0's memory.
    ok(&prog("OnRanks([0], [Kernel(\"k\", stream: \"s0@1\", reads: [\"x\"], writes: [\"x@1\"])])"));
    ok(&prog("Kernel(\"k\", stream: \"s0\", reads: [\"p\"], writes: [\"x\"])"));
    one_error("Memset(\"h\", stream: \"s0\")", &["cudaMemsetAsync cannot access pageable host memory `h`"]);
    one_error("Send(to: Next, buf: \"h\", stream: \"s0\")", &["the send cannot access pageable host memory `h`"]);
    one_error("OnRanks([0], [Send(to: Next, buf: \"x\", stream: \"s0@1\")])", &["`x` is device memory of rank 0, but the send on rank 1 can only touch device memory of rank 1"]);
    ok(&prog("Memset(\"p\", stream: \"s0\"), Group([Send(to: Next, buf: \"p\", stream: \"s0\"), Recv(from: Prev, buf: \"p\", stream: \"s0\")])"));
}

#[test]
fn event_recorded_on_another_device() {
    one_error(
        "Record(\"e\", stream: \"s0@1\")",
        &["rank 0: event `e` of rank 0 cannot be recorded on stream `s0@1` of rank 1", "`e@1`"],
    );
    ok(&prog("Record(\"e@1\", stream: \"s0@1\"), Wait(\"e@1\", stream: \"s0\")"));
}

#[test]
fn peers_and_membership() {
    let solo = "Program(ranks: 2, streams: [Stream(\"s\", NonBlocking)], buffers: [Buffer(\"x\", 8)],\n\
                comms: [Comm(\"solo\", members: [0]), Comm(\"all\")], threads: [Thread(\"t\", [\n";
    let e = errors(&format!("{solo}OnRanks([0], [Send(to: Next, buf: \"x\", stream: \"s\", comm: \"solo\")])])])"));
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("the peer is the caller itself (rank 0): `solo` has a single member"), "{e:?}");
    let e = errors(&format!("{solo}Send(to: Next, buf: \"x\", stream: \"s\", comm: \"solo\")])])"));
    assert!(e.iter().any(|m| m.contains("rank 1: the calling rank is not a member of `solo` (members: 0)")), "{e:?}");
    let e = errors(&format!("{solo}Send(to: Rank(1), buf: \"x\", stream: \"s\", comm: \"all\")])])"));
    assert_eq!(e, ["3:10: rank 1: the peer is the caller itself (rank 1) [NCCL send/recv need two different ranks]"]);
    let e = errors(&format!("{solo}OnRanks([0], [Recv(from: Rank(7), buf: \"x\", stream: \"s\", comm: \"all\")])])])"));
    assert!(e[0].contains("peer rank 7 does not exist"), "{e:?}");
    let e = errors(&format!("{solo}Send(to: Next, buf: \"x\", stream: \"s\")])])"));
    assert!(e[0].contains("the program declares 2 communicators: say which one"), "{e:?}");
    let e = errors("Program(ranks: 2, streams: [Stream(\"s\", NonBlocking)], buffers: [Buffer(\"x\", 8)], threads: [Thread(\"t\", [Send(to: Next, buf: \"x\", stream: \"s\")])])");
    assert!(e[0].contains("the program declares none"), "{e:?}");
    let e = errors(&format!("{solo}OnRanks([1], [Send(to: Rank(0), buf: \"x\", stream: \"s@1\", comm: \"all\")]), Send(to: Rank(1), buf: \"x@1\", stream: \"s@1\", comm: \"solo\")])])"));
    assert!(e.iter().any(|m| m.contains("rank 1 (the device of stream `s@1`) is not a member of `solo`")), "{e:?}");
}

#[test]
fn unbalanced_groups() {
    let e = errs("GroupEnd, GroupStart, Send(to: Next, buf: \"x\", stream: \"s0\"), GroupStart, GroupEnd");
    assert_eq!(
        e,
        [
            "3:1: GroupEnd without a matching GroupStart [every GroupEnd closes an earlier GroupStart of the same thread; Group([...]) writes both]",
            "3:11: GroupStart is never closed: thread `main` ends with this group open [add a GroupEnd, or write the group as Group([...])]",
        ]
    );
    ok(&prog("GroupStart, Group([Send(to: Next, buf: \"x\", stream: \"s0\"), Recv(from: Prev, buf: \"x\", stream: \"s0\")]), GroupEnd"));
}

#[test]
fn comm_init_rules() {
    let head = "Program(ranks: 2, streams: [Stream(\"s\", NonBlocking)], buffers: [Buffer(\"x\", 8)],\n\
                comms: [Comm(\"w\"), Comm(\"ex\", members: [0, 1], init: Explicit)], threads: [Thread(\"t\", [\n";
    let e = errors(&format!("{head}CommInit(\"w\")])])"));
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("CommInit of `w`, which is Implicit"), "{e:?}");
    let e = errors(&format!("{head}CommInit(\"ex\"), CommInit(\"ex\")])])"));
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("3:17: `ex` is initialized twice on this rank"), "{e:?}");
    let e = errors(&format!("{head}AllReduce(buf: \"x\", stream: \"s\", comm: \"ex\"), CommInit(\"ex\")])])"));
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("`ex` is used before this thread's CommInit(\"ex\")"), "{e:?}");
    ok(&format!("{head}CommInit(\"ex\"), AllReduce(buf: \"x\", stream: \"s\", comm: \"ex\")])])"));
    // Another thread of the same rank initializing does not count for this thread.
    let e = errors(&format!(
        "{head}CommInit(\"ex\")]), Thread(\"u\", [Send(to: Next, buf: \"x\", stream: \"s\", comm: \"ex\")])])"
    ));
    assert!(e[0].contains("is used before this thread's CommInit"), "{e:?}");
}

#[test]
fn p2p_size_mismatch_reports_both_places() {
    let text = prog("OnRanks([0], [Send(to: Rank(1), buf: \"x\", stream: \"s0\")]),\nOnRanks([1], [Recv(from: Rank(0), buf: \"y\", stream: \"s0\")])");
    let ds = load("t", &text).unwrap_err();
    assert_eq!(ds.len(), 1, "{ds:#?}");
    assert_eq!(ds[0].message, "rank 1: this Recv of 8192 bytes matches a Send of 4096 bytes");
    assert_eq!((ds[0].line, ds[0].column), (4, 15));
    assert_eq!(ds[0].related.len(), 1);
    assert_eq!((ds[0].related[0].line, ds[0].related[0].column), (3, 15));
    assert_eq!(ds[0].related[0].message, "the matching Send (4096 bytes)");
    // Symmetric SPMD mismatch: one diagnostic, no rank prefix.
    let e = errs("Group([Send(to: Next, buf: \"x\", stream: \"s0\"), Recv(from: Prev, buf: \"y\", stream: \"s0\")])");
    assert_eq!(e, ["3:48: this Recv of 8192 bytes matches a Send of 4096 bytes [the n-th Send from a rank to a peer matches the peer's n-th Recv from that rank on the same communicator; their sizes must be equal (a larger Recv waits forever)]"]);
    // Matching is positional: the second send matches the second recv.
    ok(&prog("Send(to: Next, buf: \"x\", stream: \"s0\"), Send(to: Next, buf: \"y\", stream: \"s0\"), Recv(from: Prev, buf: \"x\", stream: \"s0\"), Recv(from: Prev, buf: \"y\", stream: \"s1\")"));
    // Unmatched sends are not errors (the model reports the hang).
    ok(&prog("Send(to: Next, buf: \"x\", stream: \"s0\"), Send(to: Next, buf: \"y\", stream: \"s0\"), Recv(from: Prev, buf: \"x\", stream: \"s0\")"));
}

#[test]
fn collective_rules() {
    one_error("AllReduce(buf: \"x\", send: \"x\", recv: \"x\", stream: \"s0\")", &["AllReduce takes either `buf` (in place) or both `send` and `recv`"]);
    one_error("AllReduce(send: \"x\", recv: \"y\", stream: \"s0\")", &["AllReduce sizes do not fit: send is 4096 bytes, recv is 8192 bytes (recv = send, 2 members)"]);
    one_error("AllGather(send: \"x\", recv: \"x\", stream: \"s0\")", &["recv = send × members"]);
    ok(&prog("AllGather(send: \"x\", recv: \"y\", stream: \"s0\"), ReduceScatter(send: \"y\", recv: \"x\", stream: \"s0\")"));
    one_error("Broadcast(root: Rank(3), buf: \"x\", stream: \"s0\")", &["root rank 3 is not a member of `world` (members: 0, 1)"]);
    let e = errs("Parity(even: [AllReduce(buf: \"x\", stream: \"s0\")], odd: [AllReduce(buf: \"y\", stream: \"s0\")])");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("3:57: rank 1: this AllReduce of 8192 bytes does not match rank 0's AllReduce of 4096 bytes on `world`"), "{e:?}");
    let e = errs("Parity(even: [Broadcast(root: Rank(0), buf: \"x\", stream: \"s0\")], odd: [Broadcast(root: Rank(1), buf: \"x\", stream: \"s0\")])");
    assert!(e[0].contains("Broadcast of 4096 bytes from rank 1 does not match rank 0's Broadcast of 4096 bytes from rank 0"), "{e:?}");
    let e = errs("Parity(even: [AllReduce(buf: \"x\", stream: \"s0\")], odd: [Broadcast(root: Rank(1), buf: \"x\", stream: \"s0\")])");
    assert!(e[0].contains("this Broadcast of 4096 bytes from rank 1 does not match rank 0's AllReduce"), "{e:?}");
    // Fewer collectives on one member is a hang, not an error.
    ok(&prog("OnRanks([0], [AllReduce(buf: \"x\", stream: \"s0\")])"));
}

#[test]
fn pooled_buffers() {
    ok(&prog("Alloc(\"out\", stream: \"s0\"), RecordStream(\"out\", stream: \"s1\"), Free(\"out\")"));
    one_error("Alloc(\"x\", stream: \"s0\")", &["Alloc of `x`, which is not a Pooled buffer", "Pooled(\"x\", size)"]);
    one_error("Free(\"p\")", &["Free of `p`, which is neither a Pooled buffer nor device memory"]);
    one_error("RecordStream(\"out\", stream: \"s0@1\")", &["RecordStream of `out` (rank 0) on stream `s0@1` of another device (rank 1)"]);
}

#[test]
fn durations() {
    one_error("Sleep(\"10 min\")", &["3:7: invalid duration `10 min`: unknown unit `min`"]);
    one_error("Sleep(-5)", &["a duration cannot be negative"]);
    one_error("Kernel(\"k\", stream: \"s0\", duration: 1.5)", &["write fractions as a string"]);
}

#[test]
fn expansion_limit_is_enforced_quickly() {
    let e = errs("Repeat(1000000, [Repeat(1000000, [DeviceSync])])");
    assert_eq!(e.len(), 1);
    assert!(e[0].contains(&format!("expands to more than {MAX_EXPANDED_OPS} operations")), "{e:?}");
    // The body runs on 2 ranks: 2 × (MAX / 4) × 2 ops is exactly the limit, one more op per copy is over it.
    assert_eq!(MAX_EXPANDED_OPS % 4, 0);
    ok(&prog(&format!("Repeat({}, [DeviceSync, DeviceSync])", MAX_EXPANDED_OPS / 4)));
    let e = errs(&format!("Repeat({}, [DeviceSync, DeviceSync, DeviceSync])", MAX_EXPANDED_OPS / 4));
    assert!(e[0].contains(&format!("more than {MAX_EXPANDED_OPS}")), "{e:?}");
}

#[test]
fn thread_limit() {
    let threads: Vec<String> = (0..65).map(|i| format!("Thread(\"t{i}\", [])")).collect();
    let e = errors(&format!("Program(ranks: 1, threads: [{}])", threads.join(", ")));
    assert!(e[0].contains("rank 0 runs 65 threads; the limit is 64"), "{e:?}");
}

#[test]
fn on_ranks_out_of_range() {
    one_error("OnRanks([0, 4], [DeviceSync])", &["3:13: rank 4 does not exist"]);
}

#[test]
fn many_errors_are_all_collected_in_source_order() {
    let e = errs(
        "Kernel(\"k\", stream: \"s9\"),\nHostRead(\"x\"),\nGroupEnd,\nSleep(\"1 fortnight\"),\nMemset(\"nope\")",
    );
    assert_eq!(e.len(), 5, "{e:#?}");
    let lines: Vec<&str> = e.iter().map(|m| m.split(':').next().unwrap()).collect();
    assert_eq!(lines, ["3", "4", "5", "6", "7"]);
}

#[test]
fn syntax_errors_have_positions() {
    let e = errs("Kernal(name: \"k\", stream: \"s0\")");
    assert_eq!(e, ["3:1: unknown operation `Kernal` [did you mean `Kernel`?]"]);
    let ds = load("t", &prog("Kernal(name: \"k\", stream: \"s0\")")).unwrap_err();
    assert_eq!(ds[0].len, 6);
    let e = errs("Kernel(\"k\", strem: \"s0\")");
    assert_eq!(e, ["3:13: unknown field `strem` in `Kernel` [did you mean `stream`?]"]);
    let e = errs("Kernel(\"k\")");
    assert_eq!(e, ["3:11: missing field `stream` in `Kernel` [add `stream: ...`]"]);
    let e = errs("HostRead(p)");
    assert!(e[0].starts_with("3:10: expected a buffer name in double quotes, or Slice(\"name\", offset, len), found a bare name (missing quotes?)"), "{e:?}");
    let e = errors("Program(ranks: 1, threads: [Thread(\"t\", [Kernel(\"k\", stream: \"sL\")])]) extra");
    assert!(e[0].contains("unexpected text after the end of the program"), "{e:?}");
    let e = errors("Program(ranks: 1, streams: [Stream(\"s\", NonBlock)], threads: [])");
    assert_eq!(e, ["1:41: unknown stream kind `NonBlock` [did you mean `NonBlocking`?]"]);
    let e = errors("Programm(ranks: 1, threads: [])");
    assert_eq!(e, ["1:1: expected `Program`, found `Programm` [write `Program(...)`]"]);
}

#[test]
fn truncated_file() {
    let text = "Program(ranks: 1, threads: [Thread(\"t\", [DeviceSync,";
    let ds = load("t", text).unwrap_err();
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].message, "unexpected end of file");
    assert_eq!((ds[0].offset, ds[0].len), (text.len() - 1, 1), "the last character");
    assert_eq!(ds[0].related[0].message, "this `[` is never closed");
    assert_eq!(ds[0].related[0].column, 41);
    assert!(ds[0].help.as_deref().unwrap().contains("`])])`"), "{:?}", ds[0].help);
    let ds = load("t", "").unwrap_err();
    assert_eq!(ds[0].message, "unexpected end of file");
}

#[test]
fn every_prefix_of_a_valid_program_is_handled_without_panic() {
    for end in 0..ALL_OPS.len() {
        if ALL_OPS.is_char_boundary(end) {
            let r = load("t", &ALL_OPS[..end]);
            assert!(r.is_err() || end + 2 > ALL_OPS.trim_end().len(), "prefix of {end} bytes loaded");
        }
    }
}

#[test]
fn comments_and_attributes_are_accepted() {
    ok("#![enable(implicit_some)]\n/* block /* nested */ */ Program(ranks: 1, // trailing\n threads: [Thread(\"t\", [DeviceSync])],)");
}

#[test]
fn parameters_may_be_given_by_position_or_by_name() {
    let named = ok("Program(ranks: 2, streams: [Stream(name: \"s\", kind: Blocking)], buffers: [Buffer(name: \"x\", size: 8, space: Device)],\n\
         comms: [Comm(name: \"w\", members: [1, 0])], threads: [Thread(name: \"t\", ops: [\n\
         Kernel(name: \"k\", stream: \"s\", writes: [Slice(buf: \"x\", offset: 0, len: 4)]), OnRanks(ranks: [0], ops: [Repeat(count: 2, ops: [Send(to: Rank(rank: 1), buf: \"x\", stream: \"s\")])]),\n\
         Record(event: \"e\", stream: \"s\"), Memset(buf: \"x\", stream: Some(\"s\"))])], events: [\"e\"])");
    let positional = ok("Program(ranks: 2, streams: [Stream(\"s\", Blocking)], buffers: [Buffer(\"x\", 8, Device)],\n\
         comms: [Comm(\"w\", [1, 0])], threads: [Thread(\"t\", [\n\
         Kernel(\"k\", stream: \"s\", writes: [Slice(\"x\", 0, 4)]), OnRanks([0], [Repeat(2, [Send(to: Rank(1), buf: \"x\", stream: \"s\")])]),\n\
         Record(\"e\", stream: \"s\"), Memset(\"x\", stream: \"s\")])], events: [\"e\"])");
    let kinds = |p: &Program| -> Vec<Vec<OpKind>> {
        p.ranks.iter().map(|r| r.threads[0].ops.iter().map(|o| o.kind.clone()).collect()).collect()
    };
    assert_eq!(kinds(&named), kinds(&positional));
    assert_eq!(named.ranks[1].streams, positional.ranks[1].streams);
    assert_eq!(named.comms[0].members, vec![1, 0]);
}

#[test]
fn errors_about_positional_parameters() {
    let e = errors("Program(ranks: 1, streams: [Stream(\"s\", Blocking, 5)], threads: [])");
    assert_eq!(e, ["1:51: too many positional arguments for `Stream` [`Stream` takes at most 2 positional arguments: name, kind]"]);
    let e = errs("Kernel(stream: \"s0\")");
    assert_eq!(e, ["3:20: missing `name` in `Kernel` [give it as positional argument 1 or as `name: ...`]"]);
    let e = errs("Kernel(\"k\", name: \"j\", stream: \"s0\")");
    assert_eq!(e, ["3:13: `name` is given twice in `Kernel` (as a positional argument and by name)"]);
    let e = errs("Send(Next, buf: \"x\", stream: \"s0\")");
    assert_eq!(e, ["3:6: too many positional arguments for `Send` [`Send` takes only named arguments (`name: value`)]"]);
    let e = errs("HostRead(Slice(\"x\", 0))");
    assert!(e[0].contains("Slice takes 3 arguments: Slice(\"name\", offset, len)"), "{e:?}");
    let e = errors("Program(ranks: 1, threads: [Thread(\"t\")])");
    assert_eq!(e, ["1:39: missing `ops` in `Thread` [give it as positional argument 2 or as `ops: ...`]"]);
}

#[test]
fn error_paths_follow_named_parameters_too() {
    // `event: "ee"` is recorded under the positional path as well, so the error points at the value.
    let e = errs("Record(event: \"ee\", stream: \"s0\")");
    assert_eq!(e[0], "3:15: unknown event `ee` [did you mean `e`?]");
    let ds = load("t", &prog("Record(\"ee\", stream: \"s0\")")).unwrap_err();
    assert_eq!(ds[0].path.as_deref(), Some("threads[0].1[0].0"));
}

#[test]
fn random_edits_of_a_valid_program_never_panic() {
    // A fixed linear congruential generator: deterministic, no dependencies.
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move |n: usize| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) as usize) % n.max(1)
    };
    let pieces = ["(", ")", "[", "]", ",", ":", "\"", "@", "0", "99999999999999999999", "Next", "_0: ", "//", "/*", "é", " ", "Repeat(64, [", "GroupEnd,", "\"s0@1\"", "-1"];
    for _ in 0..3000 {
        let mut t = ALL_OPS.to_string();
        for _ in 0..1 + next(3) {
            let mut at = next(t.len());
            while !t.is_char_boundary(at) {
                at -= 1;
            }
            if next(2) == 0 {
                t.insert_str(at, pieces[next(pieces.len())]);
            } else {
                let mut end = (at + 1 + next(8)).min(t.len());
                while !t.is_char_boundary(end) {
                    end += 1;
                }
                t.replace_range(at..end, "");
            }
        }
        let _ = load("fuzz", &t);
    }
}

#[test]
fn known_names_list_stops_at_max_listed_names() {
    let n = super::resolve::MAX_LISTED_NAMES + 10;
    let bufs: Vec<String> = (0..n).map(|i| format!("Buffer(\"buf{i}\", \"1 KiB\")")).collect();
    let text = format!("Program(ranks: 1, buffers: [{}], threads: [Thread(\"main\", [HostRead(\"zzzzzz\")])])", bufs.join(", "));
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("known buffers: buf0, ") && e[0].contains(", and 10 more"), "{}", e[0]);
}

#[test]
fn repeat_count_over_max_repeat_count_is_an_error_naming_the_limit() {
    let e = errors(&prog(&format!("Repeat({}, [])", super::MAX_REPEAT_COUNT as u64 + 1)));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains(&format!("over the limit MAX_REPEAT_COUNT = {}", super::MAX_REPEAT_COUNT)), "{}", e[0]);
    assert!(ok_or_err(&prog(&format!("Repeat({}, [])", super::MAX_REPEAT_COUNT))));
}

fn ok_or_err(text: &str) -> bool {
    super::load("t", text).is_ok()
}

/// A `stages`-rank pipeline written with loops and rank arithmetic: each stage receives microbatch i from the
/// previous stage (except the first), computes, and sends it on (except the last).
fn pipeline(stages: u32, body: &str) -> String {
    format!(
        "Program(ranks: {stages}, streams: [Stream(\"s0\", NonBlocking)], buffers: [Buffer(\"act\", \"4 MiB\"), Buffer(\"a1\", \"1 MiB\")], \
         comms: [Comm(\"world\")], threads: [Thread(\"main\", [\n{body}\n])])"
    )
}

#[test]
fn for_if_and_rank_arithmetic_expand_per_rank_and_iteration() {
    let p = ok(&pipeline(
        3,
        r#"For(i, 0..2, [
            If(stage > 0, [Recv(from: Rank(stage - 1), buf: Slice("act", "{i} MiB", "1 MiB"), stream: "s0")]),
            Kernel("fwd{i}", stream: "s0", writes: [Slice("act", "{i} MiB", "1 MiB")]),
            If(stage + 1 < stages, [Send(to: Rank(stage + 1), buf: Slice("act", "{i} MiB", "1 MiB"), stream: "s0")]),
        ]),
        StreamSync("s0"),"#,
    ));
    let summary = |rank: usize| -> Vec<String> {
        ops_of(&p, rank, 0)
            .iter()
            .map(|k| match k {
                OpKind::Send { peer, buf, .. } => format!("send {peer} @{}", buf.offset >> 20),
                OpKind::Recv { peer, buf, .. } => format!("recv {peer} @{}", buf.offset >> 20),
                OpKind::Kernel { name, writes, .. } => format!("{name} @{}", writes[0].offset >> 20),
                OpKind::StreamSynchronize { .. } => "sync".to_string(),
                other => format!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(summary(0), ["fwd0 @0", "send 1 @0", "fwd1 @1", "send 1 @1", "sync"]);
    assert_eq!(summary(1), ["recv 0 @0", "fwd0 @0", "send 2 @0", "recv 0 @1", "fwd1 @1", "send 2 @1", "sync"]);
    assert_eq!(summary(2), ["recv 1 @0", "fwd0 @0", "recv 1 @1", "fwd1 @1", "sync"]);
    // Every op keeps the position it was written at.
    let k = &p.ranks[1].threads[0].ops[1];
    assert_eq!((k.origin.line, k.origin.column), (Some(4), Some(13)), "{k:?}");
}

/// Regression: with `Thread(.., ops: [..])` (a named field) an op inside `If(.., then: [..], else: [..])` or
/// `For(.., ops: [..])` was placed at the `If`/`For` (the span index aliased named and positional fields one level
/// deep); every kernel of a generated SPMD pipeline pointed at the wrong line.
#[test]
fn ops_in_named_branches_of_a_named_thread_keep_their_own_position() {
    let text = "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking)], threads: [Thread(\"main\", ops: [\n\
                \x20   If(stage == 0, then: [Kernel(\"a\", stream: \"s0\")], else: [Kernel(\"b\", stream: \"s0\")]),\n\
                \x20   For(i, 0..1, ops: [Kernel(\"c\", stream: \"s0\")]),\n\
                ])])";
    let p = ok(text);
    let at = |r: usize, i: usize| {
        let o = &p.ranks[r].threads[0].ops[i].origin;
        (o.line.unwrap(), o.column.unwrap())
    };
    assert_eq!(at(0, 0), (2, 27), "Kernel a in then:");
    assert_eq!(at(1, 0), (2, 62), "Kernel b in else:");
    assert_eq!(at(0, 1), (3, 24), "Kernel c in For(ops:)");
}

/// Bare expressions with parentheses and `min`/`max` (regression: a range `0..(n)` or `0..min(a, b)` was scanned as
/// the number `0..min` followed by a group, so only `0..min` was quoted and RON said "expected `,`").
#[test]
fn bare_expressions_with_parentheses_and_min_max() {
    let p = ok(&pipeline(
        2,
        r#"For(i, 0..min(stages - stage, 3), [Kernel("a{i}", stream: "s0")]),
           For(i, 0..(stages - stage), [Kernel("b{i}", stream: "s0")]),
           If(max(stage, 1) == 1, [Kernel("c{max(stage, 0)}", stream: "s0")])"#,
    ));
    let names = |r: usize| -> Vec<String> {
        ops_of(&p, r, 0)
            .iter()
            .filter_map(|k| match k {
                OpKind::Kernel { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(names(0), ["a0", "a1", "b0", "b1", "c0"]);
    assert_eq!(names(1), ["a0", "b0", "c1"]);
}

#[test]
fn loops_nest_shadowing_is_refused_and_else_branches_run() {
    let p = ok(&pipeline(
        2,
        r#"For(i, 0..2, [For(j, i..3, [If(i == j, then: [Kernel("d{i}", stream: "s0")], else: [Kernel("o{i}{j}", stream: "s0")])])]),
           For(k, 5..5, [Kernel("never", stream: "s0")]),
           For(k, 3..1, [Kernel("never", stream: "s0")])"#,
    ));
    let names: Vec<&str> = ops_of(&p, 0, 0)
        .iter()
        .map(|k| match k {
            OpKind::Kernel { name, .. } => name.as_str(),
            _ => "?",
        })
        .collect();
    assert_eq!(names, ["d0", "o01", "o02", "d1", "o12"]);
    let e = errors(&pipeline(2, r#"For(i, 0..2, [For(i, 0..2, [])])"#));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("2:19: loop variable `i` is already bound by an enclosing For"), "{e:?}");
    let e = errors(&pipeline(2, r#"For(rank, 0..2, [])"#));
    assert!(e[0].contains("`rank` is a built-in name"), "{e:?}");
}

#[test]
fn a_neighbour_past_the_last_stage_is_an_error_on_that_rank_with_a_guard_in_the_help() {
    let e = errors(&pipeline(3, r#"Send(to: Rank(stage + 1), buf: "act", stream: "s0")"#));
    assert_eq!(
        e,
        ["2:10: rank 2: peer rank 3 does not exist (`stage + 1` = 3 on rank 2) [the program has 3 ranks: 0 to 2; \
          neighbours do not wrap around: guard the op, e.g. `If(stage + 1 < ranks, [...])`]"]
    );
    let e = errors(&pipeline(3, r#"Recv(from: Rank(stage - 1), buf: "act", stream: "s0")"#));
    assert!(e[0].starts_with("2:12: rank 0: peer rank -1 does not exist"), "{e:?}");
    assert!(e[0].contains("If(stage - 1 >= 0, [...])"), "{e:?}");
}

#[test]
fn expression_errors_point_at_the_expression() {
    let e = errors(&pipeline(2, r#"For(i, 0..n, [Kernel("k{j}", stream: "s0")]), If(stage, [])"#));
    assert_eq!(
        e,
        [
            "2:8: unknown variable `n` in `0..n` [in scope here: rank, ranks, stage, stages]",
            "2:50: `stage` is a number, where If needs a condition [compare it, e.g. `If(stage > 0, [..])`]",
        ],
        "the loop is skipped (its bound failed); the If error is reported once for both ranks"
    );
    let e = errors(&pipeline(2, r#"For(i, 0..2, [Kernel("k{j}", stream: "s0"), Kernel("k{i", stream: "s0")])"#));
    assert_eq!(
        e,
        [
            "2:22: unknown variable `j` in `k{j}` [in scope here: i, rank, ranks, stage, stages]",
            "2:52: unclosed `{` in `k{i` (write `{{` for a literal brace)",
        ]
    );
    let e = errors(&pipeline(2, r#"For(i, 4, []), For(i, 0..2 +, []), Send(to: Rank(1 / (stage - stage)), buf: "act", stream: "s0")"#));
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(e[0].starts_with("2:8: `4` is not a range"), "{e:?}");
    assert!(e[1].starts_with("2:23: expression `2 +` ends too early"), "{e:?}");
    assert!(e[2].starts_with("2:50: `1 / (stage - stage)` divides by zero"), "{e:?}");
}

#[test]
fn loops_are_bounded_by_the_named_limits() {
    let e = errors(&pipeline(1, &format!("For(i, 0..{}, [])", MAX_REPEAT_COUNT as u64 + 1)));
    assert!(e[0].contains("over the limit MAX_REPEAT_COUNT"), "{e:?}");
    // Empty bodies still count their iterations: this would otherwise run 10^12 of them.
    let e = errors(&pipeline(1, "For(i, 0..1000000, [For(j, 0..1000000, [])])"));
    assert!(e[0].contains("more than MAX_EXPANDED_OPS = 2000000 iterations"), "{e:?}");
    let e = errors(&pipeline(1, r#"For(i, 0..700000, [Kernel("k", stream: "s0"), Kernel("k", stream: "s0"), Kernel("k", stream: "s0")])"#));
    assert!(e[0].contains("expands to more than 2000000 operations"), "{e:?}");
}

/// A 2-rank PyTorch-dialect program whose one thread runs `ops` (from line 2 on), with the given `torch:` field.
fn torch_prog(torch: &str, ops: &str) -> String {
    format!(
        "Program(ranks: 2, {torch} streams: [Stream(\"side\", NonBlocking)], events: [\"e\"], buffers: [Buffer(\"x\", \"1 MiB\"), Buffer(\"y\", \"1 MiB\")], threads: [Thread(\"main\", [\n{ops}\n])])"
    )
}

/// The ops of rank 0 as short labels: kernel names, `send`/`recv`, `group{`/`}`, `record(e@stream)`,
/// `wait(e@stream)`, `devsync`.
fn torch_ops(p: &Program) -> Vec<String> {
    let r = &p.ranks[0];
    let s = |st: &StreamRef| r.streams[st.index as usize].name.clone();
    let e = |ev: &EventRef| r.events[ev.index as usize].clone();
    ops_of(p, 0, 0)
        .iter()
        .map(|k| match k {
            OpKind::Kernel { name, stream, .. } => format!("{name}@{}", s(stream)),
            OpKind::Send { stream, .. } => format!("send@{}", s(stream)),
            OpKind::Recv { stream, .. } => format!("recv@{}", s(stream)),
            OpKind::GroupStart => "group{".to_string(),
            OpKind::GroupEnd => "}".to_string(),
            OpKind::EventRecord { event, stream } => format!("record({}@{})", e(event), s(stream)),
            OpKind::StreamWaitEvent { event, stream } => format!("wait({}@{})", e(event), s(stream)),
            OpKind::DeviceSynchronize { .. } => "devsync".to_string(),
            OpKind::Collective { kind, stream, .. } => format!("{}@{}", kind.name(), s(stream)),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn torch_p2p_is_lowered_as_process_group_nccl_does_it() {
    let ops = r#"InitProcessGroup, Compute("produce", writes: ["x"]), DistSend("x", dst: Rank(1 - rank)),
           Irecv("y", src: Rank(1 - rank), work: "w"), WorkWait("w"), CudaSynchronize"#;
    // Initialised eagerly (device_id given): P2P on the default group's communicator and its NCCL stream.
    let p = ok(&torch_prog("torch: Torch(init: Eager),", ops));
    assert_eq!(p.comms.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["world"], "the default process group");
    assert_eq!(p.ranks[0].streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["sL", "side", "nccl", "sPT.main"]);
    let on = |stream: &str| {
        vec![
            "produce@sL".to_string(),
            "record(torch.pre.0@sL)".into(),
            format!("wait(torch.pre.0@{stream})"),
            format!("send@{stream}"),
            format!("record(torch.end.0.0@{stream})"),
            "wait(torch.end.0.0@sL)".into(),
            "record(torch.pre.1@sL)".into(),
            format!("wait(torch.pre.1@{stream})"),
            format!("recv@{stream}"),
            format!("record(torch.end.1.0@{stream})"),
            "wait(torch.end.1.0@sL)".into(),
            "devsync".into(),
        ]
    };
    assert_eq!(torch_ops(&p), on("nccl"));
    // Initialised lazily (the default): the pair's own communicator and stream, created at its first use (P2, N8).
    let p = ok(&torch_prog("", ops));
    assert_eq!(p.comms[1], Comm { name: "torch.p2p.0:1".into(), members: vec![0, 1], explicit_init: true, nonblocking: false, watchdog_ns: None });
    assert_eq!(p.ranks[0].streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["sL", "side", "nccl", "nccl.0:1", "sPT.main"]);
    let mut expected = on("nccl.0:1");
    expected.insert(1, "CommInit { comm: CommId(1) }".into());
    assert_eq!(torch_ops(&p), expected);
}

#[test]
fn torch_batch_end_events_move_after_the_group_with_pr_82450_and_streams_nest() {
    let ops = r#"InitProcessGroup,
        WithStream("side", [BatchIsendIrecv([P2POp(Isend, "x", Next), P2POp(Irecv, "y", Prev)], works: "reqs"), WorkWait("reqs"), RecordEvent("e")]),
        WaitEvent("e"), DistAllReduce("y", async_op: "ar"), WorkWait("ar"),
        DistAllGather(output: "y", input: Slice("x", 0, "512 KiB")), DistReduceScatter(output: Slice("x", 0, "512 KiB"), input: "y")"#;
    let before = ok(&torch_prog("torch: Torch(version: Before82450),", ops));
    let since = ok(&torch_prog("", ops));
    let tail = [
        "wait(torch.end.0.0@side)",
        "wait(torch.end.0.1@side)",
        "record(e@side)",
        "wait(e@sL)",
        "record(torch.pre.1@sL)",
        "wait(torch.pre.1@nccl)",
        "AllReduce@nccl",
        "record(torch.end.1.0@nccl)",
        "wait(torch.end.1.0@sL)",
        "record(torch.pre.2@sL)",
        "wait(torch.pre.2@nccl)",
        "AllGather@nccl",
        "record(torch.end.2.0@nccl)",
        "wait(torch.end.2.0@sL)",
        "record(torch.pre.3@sL)",
        "wait(torch.pre.3@nccl)",
        "ReduceScatter@nccl",
        "record(torch.end.3.0@nccl)",
        "wait(torch.end.3.0@sL)",
    ];
    // Lazily initialised (the default): the batch first creates the default group's communicator (issue 30).
    let head = ["CommInit { comm: CommId(0) }", "record(torch.pre.0@side)", "wait(torch.pre.0@nccl)", "group{"];
    let mut expect_before: Vec<&str> = head.to_vec();
    expect_before.extend(["send@nccl", "record(torch.end.0.0@nccl)", "recv@nccl", "record(torch.end.0.1@nccl)", "}"]);
    expect_before.extend(tail);
    let mut expect_since: Vec<&str> = head.to_vec();
    expect_since.extend(["send@nccl", "recv@nccl", "}", "record(torch.end.0.0@nccl)", "record(torch.end.0.1@nccl)"]);
    expect_since.extend(tail);
    assert_eq!(torch_ops(&before), expect_before);
    assert_eq!(torch_ops(&since), expect_since);
}

#[test]
fn torch_errors_name_the_call() {
    let e = errors(&torch_prog("", r#"DistSend("x", dst: Rank(1 - rank)), InitProcessGroup, WorkWait("w")"#));
    assert_eq!(
        e,
        [
            "2:1: a torch.distributed call before dist.init_process_group [call InitProcessGroup first, as PyTorch requires]",
            "2:64: unknown work `w` [no work exists yet here: Isend, Irecv, BatchIsendIrecv and `async_op:` collectives name theirs]",
        ]
    );
    let e = errors(&torch_prog("", r#"InitProcessGroup, DistSend("x", dst: Rank(rank + 1))"#));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("2:19: rank 1: peer rank 2 does not exist (`rank + 1` = 2 on rank 1)"), "{e:?}");
    let e = errors(&torch_prog("", r#"InitProcessGroup, Compute("k", reads: ["z"])"#));
    assert!(e[0].starts_with("2:40: unknown buffer `z`"), "{e:?}");
}

#[test]
fn torch_barrier_all_reduces_a_hidden_tensor_and_synchronizes_the_current_stream() {
    let p = ok(&torch_prog("", r#"InitProcessGroup, WithStream("side", [DistBarrier])"#));
    let mut ops = torch_ops(&p);
    let last = ops.pop().unwrap();
    assert!(last.starts_with("StreamSynchronize"), "{last}");
    assert_eq!(
        ops,
        [
            // Lazily initialised (the default): the barrier first creates the default group's communicator (issue 30).
            "CommInit { comm: CommId(0) }",
            "record(torch.pre.0@side)",
            "wait(torch.pre.0@nccl)",
            "AllReduce@nccl",
            "record(torch.end.0.0@nccl)",
            "wait(torch.end.0.0@side)"
        ]
    );
    let b = p.ranks[0].buffers.last().unwrap();
    assert_eq!((b.name.as_str(), b.bytes), ("torch.barrier", 4));
    let e = errors(&torch_prog("", r#"InitProcessGroup"#).replace("Buffer(\"y\"", "Buffer(\"torch.y\""));
    assert!(e[0].contains("buffer name `torch.y` is reserved"), "{e:?}");
}

/// Bad arguments of the NCCL >= 2.28 collectives and of CommSplit are load errors at the argument, with file
/// position (C1, N8).
#[test]
fn new_collectives_and_splits_report_bad_arguments() {
    one_error("Gather(root: Rank(2), send: \"x\", recv: \"y\", stream: \"s0\")", &["3:", "root rank 2 is not a member of `world` (members: 0, 1)"]);
    one_error("Scatter(root: Rank(0), send: \"x\", recv: \"x\", stream: \"s0\")", &["Scatter sizes do not fit", "send = recv × members"]);
    one_error("AllToAll(send: \"x\", recv: \"y\", stream: \"s0\")", &["AllToAll sizes do not fit", "one block per member"]);
    let e = errs("Reduce(root: Rank(rank + 2), buf: \"x\", stream: \"s0\")");
    // One error for both ranks, each rank's value in rank order.
    assert_eq!(e, vec!["3:14: ranks 0, 1: root rank 2 / 3 is not a member of `world` (members: 0, 1)".to_string()]);
    let e = errs("Parity(even: [Gather(root: Rank(0), send: \"x\", recv: \"y\", stream: \"s0\")], odd: [Gather(root: Rank(1), send: \"x\", recv: \"y\", stream: \"s0\")])");
    assert!(e[0].contains("Gather of 4096 bytes from rank 1 does not match rank 0's Gather of 4096 bytes from rank 0"), "{e:?}");
    // Two names for one color, and a color without the communicator it creates.
    let e = errs("CommSplit(\"world\", new: \"c{rank}\", color: 0)");
    assert!(e.iter().any(|m| m.contains("rank 1: color 0 joins `c1` here, but `c0` on an earlier rank")), "{e:?}");
    one_error("CommSplit(\"world\", color: 1)", &["needs `new:`"]);
    one_error("CommSplit(\"world\", new: \"half\", color: -2)", &["color -2 is negative"]);
    // A communicator a split creates is not declared, and is used only after the split.
    let e = errs("AllReduce(buf: \"x\", stream: \"s0\", comm: \"c\"), CommSplit(\"world\", new: \"c\", color: 0)");
    assert!(e[0].contains("`c` is used before this thread's CommInit"), "{e:?}");
}

/// A split makes one communicator per color, members ordered by key then by position in the parent; NOCOLOR ranks
/// join none, and every rank's op is the n-th split of the parent.
#[test]
fn comm_split_declares_a_communicator_per_color() {
    let text = "Program(ranks: 4, buffers: [Buffer(\"g\", 64)], comms: [Comm(\"world\")], threads: [Thread(\"main\", [\n\
        If(rank < 3, then: [CommSplit(\"world\", new: \"c{rank % 2}\", color: rank % 2, key: 10 - rank)], else: [CommSplit(\"world\")]),\n\
        CommSplit(\"world\")])])";
    let p = ok(text);
    let names: Vec<(&str, &[u32])> = p.comms.iter().map(|c| (c.name.as_str(), c.members.as_slice())).collect();
    assert_eq!(names, vec![("world", &[0, 1, 2, 3][..]), ("c0", &[2, 0][..]), ("c1", &[1][..])]);
    assert_eq!(ops_of(&p, 2, 0)[0], &OpKind::CommSplit { parent: CommId(0), seq: 0, comm: Some(CommId(1)) });
    assert_eq!(ops_of(&p, 3, 0)[1], &OpKind::CommSplit { parent: CommId(0), seq: 1, comm: None });
}

#[test]
fn host_calls_that_synchronize_and_host_functions() {
    // S7: Free of a static device buffer is cudaFree; Malloc, MallocHost and LoadModule are calls of the thread's rank.
    let p = ok(&prog("Free(\"x\"), Malloc(\"64 MiB\"), MallocHost(4096), LoadModule(\"attn\")"));
    let r1 = ops_of(&p, 1, 0);
    assert_eq!(*r1[0], OpKind::CudaFree { buf: BufRef { rank: 1, index: 0 } });
    assert_eq!(*r1[1], OpKind::CudaMalloc { rank: 1, bytes: 64 << 20 });
    assert_eq!(*r1[2], OpKind::CudaMallocHost { rank: 1, bytes: 4096 });
    assert_eq!(*r1[3], OpKind::LoadModule { rank: 1, module: "attn".into() });
    // S8: a host function on a stream with host-memory accesses.
    let p = ok(&prog("HostFunc(\"cb\", stream: \"s0\", reads: [\"p\"], writes: [Slice(\"h\", 0, 1024)], calls_cuda: true, duration: \"50 us\")"));
    match ops_of(&p, 0, 0)[0] {
        OpKind::HostFunc { stream, name, reads, writes, calls_cuda, duration_ns } => {
            assert_eq!((stream.index, name.as_str(), reads.len(), writes[0].len, *calls_cuda), (1, "cb", 1, 1024, true));
            assert_eq!(*duration_ns, 50_000);
        }
        other => panic!("{other:?}"),
    }
    // Errors name the line and column of the argument at fault.
    let e = errs("Malloc(\"lots\")");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("3:8: "), "{e:?}");
    // A thread freeing another GPU's buffer (one process driving several GPUs) loads: cudaFree of that pointer.
    let p = ok(&prog("If(rank == 0, [Free(\"x@1\")])"));
    assert_eq!(*ops_of(&p, 0, 0)[0], OpKind::CudaFree { buf: BufRef { rank: 1, index: 0 } });
    let e = errs("HostFunc(\"cb\", stream: \"s0\", writes: [\"x\"])");
    assert_eq!(e.len(), 1, "reported once for both ranks: {e:?}");
    assert!(e[0].starts_with("3:39: ") && e[0].contains("a host function accesses device memory `x`"), "{e:?}");
    assert!(e[0].contains("PinnedHost or PageableHost"), "{e:?}");
    one_error("HostFunc(\"cb\", stream: \"s9\")", &["s9"]);
    one_error("LoadModule(\" \")", &["LoadModule needs a module name"]);
    one_error("HostFunc(\"cb\", stream: \"s0\", reads: [\"p@1\"])", &["host memory of rank 1's process"]);
}

/// N9, N12, N13: the communicator config and watchdog, and the lifecycle calls, load with clear errors (line:column
/// of the offending field or argument) for bad input.
#[test]
fn lifecycle_and_watchdog_errors() {
    let prog = |comms: &str, ops: &str| {
        format!(
            "Program(ranks: 2, streams: [Stream(\"s\", NonBlocking)], buffers: [Buffer(\"x\", 8)],\n\
             comms: [{comms}], threads: [Thread(\"t\", [\n{ops}])])"
        )
    };
    let p = ok(&prog(
        "Comm(\"w\", config: NonBlocking, watchdog: \"600 s\"), Comm(\"ex\", members: [0, 1], init: Explicit)",
        "CommInit(\"ex\"), Poll(\"ex\"), CommAbort(\"w\"), CommFinalize(\"ex\"), CommDestroy(\"ex\")",
    ));
    assert!(p.comms[0].nonblocking && p.comms[0].watchdog_ns == Some(600_000_000_000));
    assert!(!p.comms[1].nonblocking && p.comms[1].watchdog_ns.is_none());
    assert_eq!(*p.ranks[0].threads[0].ops.iter().map(|o| &o.kind).nth(1).unwrap(), OpKind::CommPoll { comm: CommId(1) });
    let e = errors(&prog("Comm(\"w\", watchdog: \"0 s\")", ""));
    assert!(e.len() == 1 && e[0].starts_with("2:29: the watchdog of `w` has a timeout of 0"), "{e:?}");
    let e = errors(&prog("Comm(\"w\", watchdog: \"3 parsecs\")", ""));
    assert!(e.len() == 1 && e[0].starts_with("2:29:"), "{e:?}");
    let e = errors(&prog("Comm(\"w\", config: Nonblocking)", ""));
    assert!(e.len() == 1 && e[0].contains("NonBlocking"), "{e:?}");
    let e = errors(&prog("Comm(\"w\")", "Poll(\"v\")"));
    assert!(e.len() == 1 && e[0].starts_with("3:6: unknown communicator `v`"), "{e:?}");
    let e = errors(&prog("Comm(\"w\"), Comm(\"one\", members: [1])", "CommAbort(\"one\")"));
    assert!(e.len() == 1 && e[0].contains("not a member") && e[0].contains("rank 0"), "{e:?}");
    // Poll, finalize and destroy of an Explicit communicator need this thread's CommInit first; an abort does not.
    let e = errors(&prog("Comm(\"ex\", init: Explicit)", "CommFinalize(\"ex\")"));
    assert!(e.len() == 1 && e[0].contains("used before this thread's CommInit"), "{e:?}");
    ok(&prog("Comm(\"ex\", init: Explicit)", "CommAbort(\"ex\")"));
    // The PyTorch dialect's process group timeout.
    let e = errors(&torch_prog("torch: Torch(timeout: 0),", "InitProcessGroup, DestroyProcessGroup"));
    assert!(e.len() == 1 && e[0].contains("the process group timeout is 0"), "{e:?}");
    let p = ok(&torch_prog("torch: Torch(timeout: \"30 s\"),", "InitProcessGroup, DistBarrier, DestroyProcessGroup"));
    assert!(p.comms.iter().all(|c| c.watchdog_ns == Some(30_000_000_000)));
    let kinds: Vec<&str> = p.ranks[0].threads[0].ops.iter().map(|o| o.kind.name()).collect();
    assert_eq!(kinds[kinds.len() - 2..], ["CommFinalize", "CommDestroy"]);
    let e = errors(&torch_prog("", "DestroyProcessGroup"));
    assert!(e[0].contains("before dist.init_process_group"), "{e:?}");
}

/// Regression: an unknown operation name (`Kernal`) failed deserialization of the whole file, so it was the only error
/// reported; the unknown stream before it and the unknown buffer after it showed only once it was fixed. The op is
/// now reported and skipped (`recover.rs`), and the rest of the file is checked: all three, in file order.
#[test]
fn an_unknown_op_name_hid_the_files_other_errors() {
    // On one line (tests/format_errors.rs shows the same program's rendering, laid out).
    let text = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB")], threads: [Thread("main", ops: [Kernel("k", stream: "s9", writes: ["x"]), Kernal("k2", stream: "s0", writes: ["x"]), Kernel("k3", stream: "s0", writes: ["zz"])])])"#;
    assert_eq!(
        errors(text),
        [
            "1:141: unknown stream `s9` [did you mean `s0`?]",
            "1:163: unknown operation `Kernal` [did you mean `Kernel`?]",
            "1:242: unknown buffer `zz` [known buffers: x]",
        ]
    );
    // The skipped op alone still refuses the file.
    let e = errors(&text.replace("\"s9\"", "\"s0\"").replace("\"zz\"", "\"x\""));
    assert_eq!(e, ["1:163: unknown operation `Kernal` [did you mean `Kernel`?]"]);
}

/// The other ways one op fails to deserialize (an unknown field, a value of the wrong type, a missing field, a bad
/// peer, inside a loop body or around a skipped op) are skipped the same way, every position staying right (a
/// multi-line op with a comment and a multi-byte character in it); a syntax error still stops reading, and is
/// reported after the skipped ops' errors; an error outside every op (a declaration) stops reading as before.
#[test]
fn every_malformed_op_is_skipped_and_the_rest_of_the_file_checked() {
    let e = errs(
        "Kernel(\"k\", strem: \"s0\"),\nKernel(\"k\", stream: 5),\nKernel(\"k\"),\nSend(to: Nxt, buf: \"x\", stream: \"s0\"),\n\
         Repeat(2, [Kernl(\"k\", stream: \"s0\"), HostRead(\"nope\")]),\nRepeat(2, [Kernl(\"k\", stream: \"s0\")], extra: 1),\n\
         Kernel(\n  \"é\", // a comment )\n  stream: 4),\nSend(to: 1, buf: \"x\", stream: \"s0\"),\nMemset(\"nope\")",
    );
    assert_eq!(
        e,
        [
            "3:13: unknown field `strem` in `Kernel` [did you mean `stream`?]",
            "4:21: expected a string in double quotes",
            "5:11: missing field `stream` in `Kernel` [add `stream: ...`]",
            "6:10: unknown peer `Nxt` [did you mean `Next`?]",
            "7:12: unknown operation `Kernl` [did you mean `Kernel`?]",
            "7:47: unknown buffer `nope` [known buffers: h, out, p, x, y]",
            "8:12: unknown operation `Kernl` [did you mean `Kernel`?]",
            "8:39: unknown field `extra` in `Repeat` [fields of `Repeat`: count, ops]",
            "11:11: expected a string in double quotes",
            "12:10: expected a name, found `1` [a rank is written `Rank(1)`]",
            "13:8: unknown buffer `nope` [known buffers: h, out, p, x, y]",
        ]
    );
    // A missing comma after a skipped op: both are reported, and reading stops there.
    let e = errs("Kernal(\"k\", stream: \"s0\")\nKernel(\"k\", stream: \"s9\"),\nMemset(\"nope\")");
    assert_eq!(e, ["3:1: unknown operation `Kernal` [did you mean `Kernel`?]", "4:1: expected `,`"]);
    // A declaration that does not read stops reading, as it did.
    let e = errors("Program(ranks: 1, streams: [Stream(\"s\", NonBlock)], threads: [Thread(\"t\", [Kernal(\"k\", stream: \"s\")])])");
    assert_eq!(e, ["1:41: unknown stream kind `NonBlock` [did you mean `NonBlocking`?]"]);
}

/// The placeholder the loader writes over a skipped op (`_`) is not an operation a user may write: anywhere in an op
/// list (even in a branch that never runs), it is an unknown operation, whose help does not list it.
#[test]
fn a_skipped_ops_placeholder_written_by_hand_is_an_unknown_operation() {
    let e = errs("_,\nRepeat(0, [_]),\nKernal(\"k\", stream: \"s0\"),\nDeviceSync");
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(e[0].starts_with("3:1: unknown operation `_` [operations: Kernel, Memset,"), "{e:?}");
    assert!(e[1].starts_with("4:12: unknown operation `_`"), "{e:?}");
    assert!(!e[0].contains(", _,") && !e[0].contains(": _,"), "{e:?}");
    assert_eq!(e[2], "5:1: unknown operation `Kernal` [did you mean `Kernel`?]");
    let e = errs("_");
    assert!(e.len() == 1 && e[0].starts_with("3:1: unknown operation `_`"), "{e:?}");
}

/// What a skipped op may have been (a GroupStart, a CommInit, a send, a collective, the writer an `Expect` names, the
/// CommSplit that creates a communicator) is unknown: the checks that would report its absence leave its thread
/// alone, so that one misspelt name is one error. The same mistakes without the skipped op are still reported.
#[test]
fn a_skipped_op_causes_no_follow_on_errors() {
    let prog = |ops: &str| {
        format!(
            "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking)], buffers: [Buffer(\"x\", \"4 KiB\"), Buffer(\"y\", \"4 KiB\")],\n\
             comms: [Comm(\"world\"), Comm(\"ex\", init: Explicit)], threads: [Thread(\"main\", [\n{ops}\n])])"
        )
    };
    let group = "GroupStar,\nSend(to: Next, buf: \"x\", stream: \"s0\", comm: \"world\"),\nRecv(from: Prev, buf: \"y\", stream: \"s0\", comm: \"world\"),\nGroupEnd";
    assert_eq!(errors(&prog(group)), ["3:1: unknown operation `GroupStar` [did you mean `GroupStart`?]"]);
    assert!(errors(&prog(&group.replace("GroupStar,", "DeviceSync,")))[0].contains("GroupEnd without a matching GroupStart"));
    let init = "CommInt(\"ex\"),\nSend(to: Next, buf: \"x\", stream: \"s0\", comm: \"ex\"),\nRecv(from: Prev, buf: \"y\", stream: \"s0\", comm: \"ex\")";
    assert_eq!(errors(&prog(init)), ["3:1: unknown operation `CommInt` [did you mean `CommInit`?]"]);
    assert!(errors(&prog(&init.replace("CommInt(\"ex\"),", "DeviceSync,")))[0].contains("used before this thread's CommInit"));
    // A recv of the wrong size, and a collective one rank lacks, are not blamed on the ops the skipped one shifted.
    let matching = "OnRanks([0], [Send(to: Next, buf: \"x\", stream: \"s0\", comm: \"world\"), Snd(to: Next, buf: \"x\", stream: \"s0\", comm: \"world\"), Send(to: Next, buf: \"x\", stream: \"s0\", comm: \"world\")]),\n\
         OnRanks([1], [Recv(from: Prev, buf: \"y\", stream: \"s0\", comm: \"world\"), Recv(from: Prev, buf: \"y\", stream: \"s0\", comm: \"world\"), Recv(from: Prev, buf: Slice(\"y\", 0, 16), stream: \"s0\", comm: \"world\")]),\n\
         OnRanks([0], [AllReduc(buf: \"x\", stream: \"s0\", comm: \"world\"), Broadcast(root: Rank(0), buf: \"x\", stream: \"s0\", comm: \"world\")]),\n\
         OnRanks([1], [AllReduce(buf: \"x\", stream: \"s0\", comm: \"world\"), Broadcast(root: Rank(0), buf: \"x\", stream: \"s0\", comm: \"world\")])";
    let e = errors(&prog(matching));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].contains("unknown operation `Snd`") && e[1].contains("unknown operation `AllReduc`"), "{e:?}");
    let e = errors(&prog(&matching.replace("Snd(", "Send(").replace("AllReduc(", "AllReduce(")));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("this Recv of 16 bytes matches a Send of 4096 bytes"), "{e:?}");
    // The same shift made by an op that reads (a DeviceSync where the all-reduce was) is reported.
    let e = errors(&prog(&matching.replace("Snd(", "Send(").replace("AllReduc(buf: \"x\", stream: \"s0\", comm: \"world\")", "DeviceSync")));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].contains("this Recv of 16 bytes matches a Send of 4096 bytes"), "{e:?}");
    assert!(e[1].contains("rank 1: this AllReduce of 4096 bytes does not match rank 0's Broadcast"), "{e:?}");
    // The writer an Expect names may be the skipped op.
    let expect = "Kernal(\"w\", stream: \"s0\", writes: [\"y\"]),\nExpect(\"y\", written_by: Kernel(\"w\"), stream: \"s0\")";
    assert_eq!(errors(&prog(expect)), ["3:1: unknown operation `Kernal` [did you mean `Kernel`?]"]);
    // A communicator nothing declares may be the one a skipped CommSplit creates; not when the skipped op is another.
    let split = "CommSplt(\"world\", new: \"half\", color: 0),\nAllReduce(buf: \"x\", stream: \"s0\", comm: \"half\")";
    assert_eq!(errors(&prog(split)), ["3:1: unknown operation `CommSplt` [did you mean `CommSplit`?]"]);
    let e = errors(&prog("Kernal(\"k\", stream: \"s0\"),\nAllReduce(buf: \"x\", stream: \"s0\", comm: \"half\")"));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[1].starts_with("4:41: unknown communicator `half`"), "{e:?}");
}

/// The PyTorch dialect's calls are operations too: an unknown call name (`InitProcesGroup`, `Isnd`, `NewGrop`) is
/// reported and skipped, the other calls are checked, and the calls that depend on the skipped one (every
/// torch.distributed call after the init, the wait on the work, the collective on the group) report nothing more.
#[test]
fn an_unknown_torch_call_hid_the_files_other_errors() {
    let ops = r#"InitProcesGroup,
OnRanks([0], [Isnd("x", dst: Rank(1), work: "w"), WorkWait("w"), DistSend("zz", dst: Rank(1))]),
OnRanks([1], [DistRecv("x", src: Rank(0)), DistRecv("y", src: Rank(0))]),
NewGrop("g", [0, 1]),
DistAllReduce("x", group: "g"),
Compute("c", reads: ["qq"])"#;
    let e = errors(&torch_prog("", ops));
    assert_eq!(e.len(), 5, "{e:?}");
    assert_eq!(e[0], "2:1: unknown operation `InitProcesGroup` [did you mean `InitProcessGroup`?]");
    assert_eq!(e[1], "3:15: unknown operation `Isnd` [did you mean `Isend`?]");
    assert!(e[2].starts_with("3:66: rank 0: unknown buffer `zz`"), "{e:?}");
    assert_eq!(e[3], "5:1: unknown operation `NewGrop` [did you mean `NewGroup`?]");
    assert!(e[4].starts_with("7:22: unknown buffer `qq`"), "{e:?}");
    // Fixed, only the buffers are wrong.
    let fixed = ops.replace("InitProcesGroup", "InitProcessGroup").replace("Isnd", "Isend").replace("NewGrop", "NewGroup");
    let e = errors(&torch_prog("", &fixed));
    assert_eq!(e.len(), 2, "{e:?}");
}

/// At most `MAX_SKIPPED_OPS` ops are skipped: the next one stops reading, and the limit is named.
#[test]
fn skipping_stops_at_max_skipped_ops() {
    let n = super::MAX_SKIPPED_OPS + 3;
    let ops: Vec<String> = (0..n).map(|i| format!("Kernl(\"k{i}\", stream: \"s0\")")).collect();
    let e = errs(&ops.join(",\n"));
    assert_eq!(e.len(), super::MAX_SKIPPED_OPS + 2, "{:?}", &e[e.len() - 3..]);
    assert!(e[..=super::MAX_SKIPPED_OPS].iter().all(|m| m.contains("unknown operation `Kernl`")));
    assert!(e.last().unwrap().contains(&format!("MAX_SKIPPED_OPS = {}", super::MAX_SKIPPED_OPS)), "{e:?}");
}
