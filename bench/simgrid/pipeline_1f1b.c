/* pipeline_1f1b.c: the 1F1B pipeline schedule of `cuorder gen pipeline --schedule 1f1b` as an MPI program for
 * SimGrid/SMPI, so that SMPI's predicted makespan and its own cost (wall time, memory) can be set beside
 * `cuorder time` on the same pipeline (bench/simgrid.sh does that and prints the table).
 *
 * Stage = rank, S = world size. Per rank, Megatron-LM's forward_backward_pipelining_without_interleaving:
 *   warm-up:   min(S - rank - 1, M) x [recv_forward, forward, send_forward]
 *   steady:    recv_forward once, then M - warm-up x [forward, send_forward_recv_backward, backward,
 *              send_backward_recv_forward (send_backward on the last iteration)]
 *   cool-down: warm-up x [recv_backward, backward, send_backward]
 * Each p2p call is one batch (Megatron's batch_isend_irecv): MPI_Isend/MPI_Irecv to the neighbours, then
 * MPI_Waitall, like the grouped NCCL send/recv of the cuorder program. First/last stage skip the missing side.
 *
 * Compute is simulated, not run: forward = smpi_execute_flops(1e6), backward = smpi_execute_flops(2e6) on hosts of
 * 1 Gf (the platform written by bench/simgrid/platform.sh), i.e. exactly 1 ms and 2 ms. Run with
 * --cfg=smpi/simulate-computation:no so the host CPU time between MPI calls is not charged.
 *
 * Payloads are never touched: the program installs a no-op payload copy with smpi_comm_set_copy_data_callback
 * (smpi.h: "public setter for SMPI copy_callback function"), so SMPI times each 16 MiB message but copies no byte,
 * and the buffers are plain malloc'ed address space that is never written (no resident pages). SMPI_SHARED_MALLOC
 * was tried first and dropped: SimGrid 3.32 maps its 1 MiB shared block with MAP_POPULATE once per MiB of every
 * buffer, so peak RSS counts 64 MiB per rank that is really one shared MiB (4 GiB reported at 64 ranks), and the
 * 16 mappings per buffer pass vm.max_map_count (65530) near 1024 ranks. No mutable globals, so the program runs
 * with --cfg=smpi/privatization:no (no per-rank copy of the binary).
 *
 * Output (rank 0, the rank that ends a 1F1B iteration): "makespan_s <simulated seconds>" from MPI_Wtime.
 *
 * Build: smpicc -O2 -o pipeline_1f1b bench/simgrid/pipeline_1f1b.c
 * Run:   smpirun -np S -platform platform-S.xml -hostfile hosts-S.txt ./pipeline_1f1b M BYTES
 *        (bench/simgrid.sh writes the platform, the host file and the full set of --cfg flags)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define FWD_FLOPS 1e6 /* 1 ms at 1 Gf */
#define BWD_FLOPS 2e6 /* 2 ms at 1 Gf */

/* The payload copy SMPI does when a message completes: none (only the timing of messages matters here). */
static void no_copy(smx_activity_t comm, void *buff, size_t size)
{
  (void)comm;
  (void)buff;
  (void)size;
}

struct stage {
  int rank, size, bytes;
  char *send_fwd, *recv_fwd, *send_bwd, *recv_bwd;
};

/* One batch_isend_irecv: optional send/recv to the next stage (activations out, gradients in) and to the previous
 * stage (gradients out, activations in), then wait for all of them. */
static void communicate(const struct stage *s, int send_next, int recv_next, int send_prev, int recv_prev)
{
  MPI_Request req[4];
  int n = 0;
  int prev = s->rank - 1, next = s->rank + 1;
  if (prev < 0) send_prev = recv_prev = 0;
  if (next >= s->size) send_next = recv_next = 0;
  if (send_prev) MPI_Isend(s->send_bwd, s->bytes, MPI_BYTE, prev, 1, MPI_COMM_WORLD, &req[n++]);
  if (recv_prev) MPI_Irecv(s->recv_fwd, s->bytes, MPI_BYTE, prev, 0, MPI_COMM_WORLD, &req[n++]);
  if (send_next) MPI_Isend(s->send_fwd, s->bytes, MPI_BYTE, next, 0, MPI_COMM_WORLD, &req[n++]);
  if (recv_next) MPI_Irecv(s->recv_bwd, s->bytes, MPI_BYTE, next, 1, MPI_COMM_WORLD, &req[n++]);
  if (n) MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
}

int main(int argc, char **argv)
{
  struct stage s;
  MPI_Init(&argc, &argv);
  if (argc < 3) {
    fprintf(stderr, "usage: %s MICROBATCHES BYTES\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int m = atoi(argv[1]);
  s.bytes = atoi(argv[2]);
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.size);
  smpi_comm_set_copy_data_callback(no_copy);
  s.send_fwd = malloc(s.bytes);
  s.recv_fwd = malloc(s.bytes);
  s.send_bwd = malloc(s.bytes);
  s.recv_bwd = malloc(s.bytes);
  if (!s.send_fwd || !s.recv_fwd || !s.send_bwd || !s.recv_bwd) {
    fprintf(stderr, "rank %d: cannot reserve 4 x %d bytes\n", s.rank, s.bytes);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  int warmup = s.size - s.rank - 1;
  if (warmup > m) warmup = m;
  int remaining = m - warmup;
  double start = MPI_Wtime();

  for (int i = 0; i < warmup; i++) {
    communicate(&s, 0, 0, 0, 1); /* recv_forward */
    smpi_execute_flops(FWD_FLOPS);
    communicate(&s, 1, 0, 0, 0); /* send_forward */
  }
  if (remaining > 0) communicate(&s, 0, 0, 0, 1); /* recv_forward */
  for (int i = 0; i < remaining; i++) {
    int last = i == remaining - 1;
    smpi_execute_flops(FWD_FLOPS);
    communicate(&s, 1, 1, 0, 0); /* send_forward_recv_backward */
    smpi_execute_flops(BWD_FLOPS);
    if (last)
      communicate(&s, 0, 0, 1, 0); /* send_backward */
    else
      communicate(&s, 0, 0, 1, 1); /* send_backward_recv_forward */
  }
  for (int i = 0; i < warmup; i++) {
    communicate(&s, 0, 1, 0, 0); /* recv_backward */
    smpi_execute_flops(BWD_FLOPS);
    communicate(&s, 0, 0, 1, 0); /* send_backward */
  }

  if (s.rank == 0) printf("makespan_s %.9f\n", MPI_Wtime() - start);
  free(s.send_fwd);
  free(s.recv_fwd);
  free(s.send_bwd);
  free(s.recv_bwd);
  MPI_Finalize();
  return 0;
}
