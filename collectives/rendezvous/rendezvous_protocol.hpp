#pragma once

// The rendezvous store's protocol. It lives here, below the actors layer,
// because collectives (hvd::init in any process) are its clients; the store
// actor itself is in actors/ and interfaces.hpp re-exports this header.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/type_id.hpp>

namespace hvactor::proto {

/// A list of keys (rendezvous_store::wait).
struct key_list {
  std::vector<std::string> keys;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, key_list& x) {
  return f(caf::meta::type_name("key_list"), x.keys);
}

/// Keys and their values, in the same order (rendezvous_store gather).
struct kv_batch {
  std::vector<std::string> keys;
  std::vector<std::vector<char>> values;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_batch& x) {
  return f(caf::meta::type_name("kv_batch"), x.keys, x.values);
}

/// A gather's answer: the value of every key asked for, in order; the
/// indices of those not set by the deadline in `missing` (their values
/// empty).
struct kv_found {
  std::vector<std::vector<char>> values;
  std::vector<int32_t> missing;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_found& x) {
  return f(caf::meta::type_name("kv_found"), x.values, x.missing);
}

/// Part of the reason the elastic driver closes a generation's scope with
/// when a worker of that generation failed: a rank of it that still waits
/// in a collective stops at once (gloo_backend), since the others reset.
inline constexpr const char* superseded_after_failure = "a worker of it failed";

/// Part of the reason a static job's driver closes the job's scope with
/// when a node of the job left the cluster (its process died, or its link
/// went down: CAF's heartbeat timeout): "peer rank R (pid P) on node 'N' at
/// ADDRESS is unreachable: the node left the cluster during the job (...)".
/// A rank that waits in a collective on it stops at once, blaming rank R
/// (gloo_backend), instead of waiting out its transfer timeout on a peer
/// whose packets no longer arrive.
inline constexpr const char* node_left_the_cluster = "the node left the cluster during the job";

/// The key a static job's driver sets in the job's scope when a rank's
/// process exited during the job (a signal, a non-zero status; in an
/// executor's job, any exit), to "peer rank R (pid P) on node 'N' died
/// during the job: signal 9 (SIGKILL)". Every rank that waits in a
/// collective stops at once, blaming rank R (gloo_backend's failure
/// watch), whether or not it waits on R's connection: a Gloo send parked
/// after its write failed is never told that the pair closed, and a rank
/// of a hierarchical job may wait across nodes on a live peer that itself
/// waits on R in shared memory. The scope stays open: the ranks still
/// tell each other whom they blame there.
inline constexpr const char* rank_died_key = "hvactor/rank-died";

/// Part of rank_died_key's value.
inline constexpr const char* worker_died_during_the_job = "died during the job";

} // namespace hvactor::proto

CAF_BEGIN_TYPE_ID_BLOCK(hvactor_rendezvous, caf::first_custom_type_id)
  CAF_ADD_ATOM(hvactor_rendezvous, hvactor::proto, set_atom, "kv_set")
  CAF_ADD_ATOM(hvactor_rendezvous, hvactor::proto, get_atom, "kv_get")
  CAF_ADD_ATOM(hvactor_rendezvous, hvactor::proto, wait_atom, "kv_wait")
  CAF_ADD_ATOM(hvactor_rendezvous, hvactor::proto, expire_atom, "expire")
  CAF_ADD_ATOM(hvactor_rendezvous, hvactor::proto, close_atom, "kv_close")
  CAF_ADD_ATOM(hvactor_rendezvous, hvactor::proto, take_atom, "kv_take")
  CAF_ADD_ATOM(hvactor_rendezvous, hvactor::proto, gather_atom, "kv_gather")
  CAF_ADD_TYPE_ID(hvactor_rendezvous, (hvactor::proto::key_list))
  CAF_ADD_TYPE_ID(hvactor_rendezvous, (hvactor::proto::kv_batch))
  CAF_ADD_TYPE_ID(hvactor_rendezvous, (hvactor::proto::kv_found))
CAF_END_TYPE_ID_BLOCK(hvactor_rendezvous)

namespace hvactor::proto {

/// Key-value store for rendezvous, scoped per job and generation
/// ("<job>/<generation>"); keys carry the user's prefix.
using rendezvous_store = caf::typed_actor<
  caf::replies_to<set_atom, std::string, std::string, std::vector<char>>::with<bool>,
  // Answers once the key exists, or fails with rendezvous_timeout.
  caf::replies_to<get_atom, std::string, std::string, caf::timespan>::with<std::vector<char>>,
  caf::replies_to<wait_atom, std::string, key_list, caf::timespan>::with<bool>,
  // One round trip of a rendezvous: sets the batch's keys, then answers
  // the values of the listed keys once every one is set, or at the
  // timeout with those that are (never an error for a missing key; a
  // closed scope is one).
  caf::replies_to<gather_atom, std::string, kv_batch, key_list, caf::timespan>::with<kv_found>,
  // The value of a key that is set now, removed from the store (moved out,
  // not copied); an error when it is not set.
  caf::replies_to<take_atom, std::string, std::string>::with<std::vector<char>>,
  // An elastic job's superseded generation: forget the scope's keys and
  // fail its waits, and every later request on it, with the text given.
  caf::reacts_to<close_atom, std::string, std::string>,
  // Internal timer: fail waits whose deadline passed.
  caf::reacts_to<expire_atom, uint64_t>>;

/// Registers the types above with `cfg`.
void register_rendezvous_types(caf::actor_system_config& cfg);

} // namespace hvactor::proto
