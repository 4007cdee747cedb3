// "ucx": one-sided reads and writes through UCX (Debian's libucx), over
// whatever UCX finds between two engines -- its tcp and shared-memory
// transports here, RDMA verbs where the hardware exists (UCX_TLS selects,
// as UCX's own configuration always does).
//
// The target maps each region it registers with remote access into UCX
// (protection from the region's access bits) and publishes the packed
// remote key as the region's ucx blob; its hello carries the worker's
// address as the ucx link blob. The initiator opens one endpoint per peer
// and unpacks each region's key once, then puts and gets straight into the
// target's memory: the target's CPU runs no handler (on UCX's tcp, its
// worker thread answers). Like shm, the initiator checks each op against
// the peer's table (range and access bits) before it is posted, and the
// target cannot count the ops in flight (see TransferEngine's contract on
// unregistering). A write completes once a flush of the endpoint says it
// reached the target, so a notify sent after it finds the bytes in place.
//
// Every call on the worker and its endpoints runs on the transport's one
// progress thread; other threads hand it work. An op that has not
// completed within EngineConfig::op_timeout closes its endpoint, which
// fails every op on it (kUnavailable, scope kEndpoint); the next link to
// the peer opens a new one. Host memory only. Bytes move outside the
// engine's sealed connections: refused with EngineConfig::encrypt_data;
// with only a secret, run it on a trusted fabric.
#ifndef SLUICE_TRANSFER_UCX_UCX_TRANSPORT_H_
#define SLUICE_TRANSFER_UCX_UCX_TRANSPORT_H_

#include <memory>

#include "transfer/transport.h"

namespace sluice::internal {

// Errors: kFailedPrecondition (encrypt_data asked for), kUnavailable (UCX
// would not start: its message).
Result<std::unique_ptr<Transport>> MakeUcxTransport(const EngineConfig& config);

// How ucx ranks among the transports (TransportFactory::rank), by what
// UCX_TLS lets UCX use: only tcp among its network and shared-memory
// transports -- its tcp's measured 2.6 GB/s and 175 us (below the engine's
// own tcp); else its shared memory's 9.1 GB/s and 73 us (RDMA, unmeasured
// here, ranks with it).
void UcxRank(double* gbps, double* latency_us);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_UCX_UCX_TRANSPORT_H_
