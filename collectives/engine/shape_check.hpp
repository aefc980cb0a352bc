#pragma once

// Internal: the check every job runs before each collective (the name
// check of negotiation compares more). The ranks reduce a small
// fingerprint of what they are about to run (kind, type, the counts that
// must agree, reduction, root; not names): equal everywhere, the operation
// runs; different, they show each other their lists and all fail with one
// collective_error naming both sides. Without it a rank that passes another
// element count reaches Gloo, which aborts the process from its own thread
// (gloo::EnforceNotMet), or corrupts memory on the shared-memory path. The
// engine exchanges the values (engine::agree_on_shapes); this file only
// computes and decides, so it is tested as plain code.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collectives/engine/name_check.hpp"

namespace hvactor::collectives::shape_check {

/// A number in [0, 2^62) that differs, but for a vanishing chance, between
/// two lists that may not run together: the batch flag, the length, and per
/// operation what same_shape() compares.
int64_t fingerprint(const op_list& list);

/// fingerprint() of the list {batch, {*ops[0], *ops[1], ...}}, without
/// copying the operations.
int64_t fingerprint(bool batch, std::span<const operation* const> ops);

/// The first `n` operations of `list` (a batch's common prefix).
op_list prefix(const op_list& list, size_t n);

/// Given every rank's list (index = rank), throws collective_error at the
/// first operation where a rank differs from rank 0, in Horovod's words
/// ("Mismatched allreduce tensor sizes: rank 0 sent ... but rank 2 sent
/// ..."), naming both ranks and both values, and `rank` and `host` (this
/// process). Returns when the lists agree.
void explain(const std::vector<op_list>& lists, int rank, const std::string& host);

} // namespace hvactor::collectives::shape_check
