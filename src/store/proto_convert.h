// Conversions between the store's public value types and its wire messages.
#ifndef SLUICE_STORE_PROTO_CONVERT_H_
#define SLUICE_STORE_PROTO_CONVERT_H_

#include "sluice/store/types.h"

#include "proto/store/v1/master.pb.h"
#include "store/master/master_state.h"

namespace sluice::internal {

inline TensorMeta FromProto(const store::v1::TensorMeta& p) {
  return TensorMeta{p.dtype(),
                    {p.shape().begin(), p.shape().end()},
                    {p.strides().begin(), p.strides().end()},
                    p.layout()};
}

inline void ToProto(const TensorMeta& t, store::v1::TensorMeta* p) {
  p->set_dtype(t.dtype);
  p->mutable_shape()->Assign(t.shape.begin(), t.shape.end());
  p->mutable_strides()->Assign(t.strides.begin(), t.strides.end());
  p->set_layout(t.layout);
}

inline LeasePolicy FromProto(const store::v1::LeasePolicy& p) {
  LeasePolicy l;
  switch (p.kind()) {
    case store::v1::LeasePolicy::DELETE_ON_CONSUME:
      l.kind = LeaseKind::kDeleteOnConsume;
      break;
    case store::v1::LeasePolicy::TTL:
      l.kind = LeaseKind::kTtl;
      break;
    case store::v1::LeasePolicy::SOFT_PIN:
      l.kind = LeaseKind::kSoftPin;
      break;
    default:
      l.kind = LeaseKind::kCache;
  }
  l.consume_count = p.consume_count();
  l.ttl = std::chrono::milliseconds(p.ttl_ms());
  l.cache_class = p.cache_class();
  return l;
}

inline void ToProto(const LeasePolicy& l, store::v1::LeasePolicy* p) {
  switch (l.kind) {
    case LeaseKind::kCache:
      p->set_kind(store::v1::LeasePolicy::CACHE);
      break;
    case LeaseKind::kDeleteOnConsume:
      p->set_kind(store::v1::LeasePolicy::DELETE_ON_CONSUME);
      break;
    case LeaseKind::kTtl:
      p->set_kind(store::v1::LeasePolicy::TTL);
      break;
    case LeaseKind::kSoftPin:
      p->set_kind(store::v1::LeasePolicy::SOFT_PIN);
      break;
  }
  p->set_consume_count(l.consume_count);
  p->set_ttl_ms(static_cast<std::uint64_t>(l.ttl.count()));
  p->set_cache_class(l.cache_class);
}

inline void ToProto(const ReplicaLocation& r, store::v1::Replica* p) {
  p->set_node_id(r.node_id);
  p->set_endpoint(r.endpoint);
  p->set_region_key(r.region_key);
  p->set_offset(r.offset);
}

inline ReplicaLocation FromProto(const store::v1::Replica& p) {
  return ReplicaLocation{p.node_id(), p.endpoint(), p.region_key(), p.offset()};
}

inline void ToProto(const ObjectRecord& r, store::v1::ObjectRecord* p) {
  p->set_key(r.key);
  p->set_region_key(r.region_key);
  p->set_offset(r.offset);
  p->set_size(r.size);
  if (r.tensor.has_value()) {
    ToProto(*r.tensor, p->mutable_tensor());
  }
  ToProto(r.policy, p->mutable_policy());
  p->set_on_disk(r.on_disk);
  p->set_disk_offset(r.disk_offset);
  p->set_reads_done(r.reads_done);
  // `expires_at` travels as time left (ttl_left_ms), set by the sender.
}

inline ObjectRecord FromProto(const store::v1::ObjectRecord& p) {
  ObjectRecord r;
  r.key = p.key();
  r.region_key = p.region_key();
  r.offset = p.offset();
  r.size = p.size();
  r.policy = FromProto(p.policy());
  if (p.has_tensor()) {
    r.tensor = FromProto(p.tensor());
  }
  r.on_disk = p.on_disk();
  r.disk_offset = p.disk_offset();
  r.reads_done = p.reads_done();
  // `expires_at` comes from ttl_left_ms, set by the receiver.
  return r;
}

}  // namespace sluice::internal

#endif  // SLUICE_STORE_PROTO_CONVERT_H_
