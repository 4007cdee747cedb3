// Writes the binary seeds of fuzz/corpus/ (the text ones are written by
// hand): `make_fuzz_seeds DIR`. Re-run it when a wire format changes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "sluice/connector/descriptor.h"

#include "proto/store/v1/master.pb.h"
#include "store/fastlane/frame.h"
#include "transfer/wire.h"

namespace {

using namespace sluice;
using namespace sluice::internal;
namespace pb = ::sluice::store::v1;

bool Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  return static_cast<bool>(out);
}

std::string Lane(fastlane::Method m, const google::protobuf::Message& body) {
  fastlane::RequestHeader h;
  h.method = static_cast<std::uint16_t>(m);
  const std::string b = body.SerializeAsString();
  h.body_len = static_cast<std::uint32_t>(b.size());
  std::byte head[fastlane::kHeaderSize];
  fastlane::Encode(h, head);
  return std::string(reinterpret_cast<const char*>(head), sizeof(head)) + b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_fuzz_seeds DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;

  ClientHello hello;
  hello.endpoint = "127.0.0.1:7000";
  hello.host = HostInfo::Self();
  RegionTable table;
  table.version = 3;
  WireRegion r;
  r.info.key.value = 0x1234;
  r.info.length = 1 << 20;
  r.info.access = Access::kRemoteReadWrite;
  r.info.shared = true;
  // shm's blob: memfd 7 at offset 0 of a 1 MiB allocation, inode 99.
  std::string shm(28, '\0');
  const std::int32_t fd = 7;
  const std::uint64_t size = 1 << 20, inode = 99;
  std::memcpy(shm.data(), &fd, 4);
  std::memcpy(shm.data() + 12, &size, 8);
  std::memcpy(shm.data() + 20, &inode, 8);
  r.access = {{"shm", shm}, {"ucx", std::string(12, 'k')}};
  WireRegion dev;  // Exported device memory: devipc's IPC handle and offset.
  dev.info.key.value = 0x9abc;
  dev.info.length = 1 << 20;
  dev.info.kind = MemoryKind::kDevice;
  dev.info.device = 1;
  dev.info.access = Access::kRemoteRead;
  std::string ipc(104, '\x42');
  const std::uint64_t ipc_offset = 4096;
  std::memcpy(ipc.data() + 96, &ipc_offset, 8);
  dev.access = {{"devipc", ipc}};
  table.regions = {r, r, dev};
  table.regions[1].info.key.value = 0x5678;
  HelloOk hok;
  hok.host = HostInfo::Self();
  hok.table = table;
  hok.links = {{"ucx", std::string(200, 'a')}};
  ok &= Write(dir + "/wire_fuzz/client_hello", std::string(1, '\0') + EncodeClientHello(hello));
  ok &= Write(dir + "/wire_fuzz/hello_ok", std::string(1, '\1') + EncodeHelloOk(hok));
  ok &= Write(dir + "/wire_fuzz/table", std::string(1, '\2') + EncodeTable(table));

  pb::PutStartRequest put;
  put.set_key("sluice/job/1/latent/0");
  put.set_size(1 << 20);
  put.set_replica_num(1);
  ok &= Write(dir + "/fastlane_fuzz/put_start", Lane(fastlane::Method::kPutStart, put));
  pb::GetStartRequest get;
  get.set_key("sluice/job/1/latent/0");
  ok &= Write(dir + "/fastlane_fuzz/get_start", Lane(fastlane::Method::kGetStart, get));
  pb::KeyRequest key;
  key.set_key("k");
  ok &= Write(dir + "/fastlane_fuzz/exists", Lane(fastlane::Method::kExists, key));

  PayloadDescriptor d;
  d.request_id = "req-1";
  d.kind = PayloadKind::kLatent;
  d.dtype = DType::kBF16;
  d.shape = {1, 16, 21, 90, 160};
  d.chunk_dim = 2;
  d.num_chunks = 8;
  d.mode = TransferMode::kP2p;
  d.producer_endpoint = "127.0.0.1:7000";
  d.region_key = 0xFEDCBA9876543210ull;
  d.region_offset = 4096;
  d.payload_id = 0x8000000000000001ull;
  PayloadDescriptor s;
  s.request_id = "r";
  s.dtype = DType::kF32;
  s.shape = {4, 8};
  s.chunk_dim = 1;
  s.num_chunks = 4;
  s.mode = TransferMode::kStore;
  s.key_prefix = "sluice/x";
  s.lease = *Lease::Parse("ttl:30");
  ok &= Write(dir + "/descriptor_fuzz/p2p_binary", std::string(1, '\0') + d.Encode());
  ok &= Write(dir + "/descriptor_fuzz/p2p_json", std::string(1, '\1') + d.ToJson());
  ok &= Write(dir + "/descriptor_fuzz/store_binary", std::string(1, '\0') + s.Encode());
  ok &= Write(dir + "/descriptor_fuzz/store_json", std::string(1, '\1') + s.ToJson());
  PayloadDescriptor on_device = d;  // Version 3: published from device memory.
  on_device.memory = MemoryKind::kDevice;
  on_device.device = 1;
  ok &=
      Write(dir + "/descriptor_fuzz/p2p_device_binary", std::string(1, '\0') + on_device.Encode());
  ok &= Write(dir + "/descriptor_fuzz/p2p_device_json", std::string(1, '\1') + on_device.ToJson());
  // engine_conn_fuzz: a mode byte (bit 0: handshake first; bit 1: ask for
  // table pushes; bit 2: frames unsealed; bit 3: payload encrypted), then
  // what the connection sends. "SLUICEKY" becomes the target region's key.
  std::uint64_t placeholder = 0;
  std::memcpy(&placeholder, "SLUICEKY", sizeof(placeholder));
  auto frame = [&](FrameType type, std::uint64_t id, std::uint64_t offset, std::uint64_t length,
                   const std::string& payload) {
    WireHeader h = MakeHeader(type, id, length);
    h.key = placeholder;
    h.offset = offset;
    return std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + payload;
  };
  const std::string data_frames = frame(FrameType::kWriteReq, 1, 64, 16, std::string(16, 'w')) +
                                  frame(FrameType::kReadReq, 2, 64, 16, "") +
                                  frame(FrameType::kNotify, 3, 0, 5, "hello");
  ok &= Write(dir + "/engine_conn_fuzz/data_frames", std::string(1, '\1') + data_frames);
  ok &=
      Write(dir + "/engine_conn_fuzz/data_frames_encrypted", std::string(1, '\x09') + data_frames);
  ok &= Write(dir + "/engine_conn_fuzz/data_frames_unsealed", std::string(1, '\x05') + data_frames);
  ok &= Write(dir + "/engine_conn_fuzz/with_table",
              std::string(1, '\3') + frame(FrameType::kReadReq, 1, 0, 4096, ""));
  ok &= Write(dir + "/engine_conn_fuzz/no_handshake",
              std::string(1, '\0') + EncodeClientHello(hello));
  // A hello without the secret's proof, then a write with the guarded
  // region's key (the fuzzer's invariant: it must change nothing).
  const std::string unproven = EncodeClientHello(hello);
  const WireHeader hello_header = MakeHeader(FrameType::kClientHello, 0, unproven.size());
  ok &= Write(dir + "/engine_conn_fuzz/unproven_write",
              std::string(1, '\0') +
                  std::string(reinterpret_cast<const char*>(&hello_header), sizeof(hello_header)) +
                  unproven + data_frames);
  if (!ok) {
    std::cerr << "make_fuzz_seeds: cannot write under " << dir << " (its folders must exist)\n";
    return 1;
  }
  return 0;
}
