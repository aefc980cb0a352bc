#pragma once

// Private to the LibTorch adapter: the tensor descriptions ranks exchange
// before a tensor collective, so that a peer's shape or dtype is checked
// before a byte of its data is written (Horovod's shape negotiation).
//
// Every rank sends one word list: the number of tensors, then per tensor
// its scalar type, its device type, its number of dimensions and each
// dimension. The lists travel through one allgather; every rank then holds
// the same table and reaches the same verdict, so a mismatch throws the
// same collective_error on every rank instead of corrupting memory on some.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "hvactor/hvd_types.hpp"

namespace hvactor::hvd::detail {

/// One rank's description of one tensor.
struct tensor_desc {
  int64_t scalar_type = 0;
  int64_t device_type = 0;
  std::vector<int64_t> sizes;
};

/// Every rank's descriptions, index = rank.
using desc_table = std::vector<std::vector<tensor_desc>>;

/// Appends `ts`' word list (count, then each tensor) to `words`.
void describe(std::span<const torch::Tensor> ts, std::vector<int64_t>& words);

/// Splits the concatenated word lists of `ranks` ranks. Throws
/// collective_error naming the rank whose list is malformed (a negative
/// dimension, more dimensions than LibTorch allows, a truncated list).
desc_table split_descs(std::span<const int64_t> words, int ranks, std::string_view call);

/// Gathers every rank's description of `ts` (one allgather).
desc_table exchange(std::span<const torch::Tensor> ts, std::string_view call);

/// "float32 [2, 3]" (the scalar type in LibTorch's spelling when hvd does
/// not carry it).
std::string to_string(const tensor_desc& d);

/// For allgather of one tensor per rank: throws collective_error when a
/// rank's scalar type, device, number of dimensions or any dimension but
/// the first differs from rank 0's, naming both ranks and both shapes.
/// `call` is e.g. "hvd::allgather 'grads'".
void check_allgather(const desc_table& table, std::string_view call);

/// For broadcast: throws collective_error when a rank has another number of
/// tensors than `root`, or a tensor of another scalar type, device or shape,
/// naming both ranks, the tensor's index and both shapes.
void check_broadcast(const desc_table& table, int root, std::string_view call);

/// For reducescatter: throws collective_error when a rank has another
/// number of tensors than rank 0, or a tensor of another scalar type,
/// device or shape, naming both ranks and both shapes.
void check_same(const desc_table& table, std::string_view call);

/// hvd's dtype for `t` (on any device). Throws std::invalid_argument
/// naming `call` (e.g. "allreduce") for scalar types hvd does not carry.
dtype dtype_of_tensor(const torch::Tensor& t, const char* call);

/// "hvd::<op>" or "hvd::<op> '<name>'".
std::string call_name(std::string_view op, std::string_view name);

/// `t`'s dimensions, for the collectives that compare them across ranks
/// (allreduce: Horovod's shape check in negotiation).
inline std::span<const int64_t> dims(const torch::Tensor& t) {
  auto s = t.sizes();
  return {s.data(), s.size()};
}

} // namespace hvactor::hvd::detail
