// Status <-> grpc::Status, both ways, keeping the code. Messages cross as
// they are; the scope of an RPC transport failure is kEndpoint.
#ifndef SLUICE_COMMON_RPC_STATUS_H_
#define SLUICE_COMMON_RPC_STATUS_H_

#include <grpcpp/grpcpp.h>

#include "sluice/status.h"

namespace sluice::internal {

grpc::Status ToGrpc(const Status& s);
Status FromGrpc(const grpc::Status& s, std::string_view what);

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_RPC_STATUS_H_
