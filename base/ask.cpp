#include "base/internal/ask.hpp"

#include <memory>
#include <string>

#include <caf/attachable.hpp>
#include <caf/local_actor.hpp>
#include <fmt/format.h>

#include "base/internal/caf_error.hpp"

namespace hvactor {

namespace {

class answer_on_exit : public caf::attachable {
public:
  static constexpr size_t token_type = 0x68766163; // "hvac"

  answer_on_exit(caf::weak_actor_ptr caller, caf::message_id answer_id)
    : caller_(std::move(caller)), answer_id_(answer_id) {
  }

  void actor_exited(const caf::error& reason, caf::execution_unit* host) override {
    auto caller = caf::actor_cast<caf::strong_actor_ptr>(caller_);
    if (!caller)
      return;
    // The actor is gone; its name is the attachable's owner's, passed in
    // through the reason when it failed with one of hvactor's errors.
    caller->enqueue(caf::make_mailbox_element(nullptr, answer_id_, {},
                                              exited_error(name_, reason)),
                    host);
  }

  bool matches(const token& what) override {
    return what.subtype == token_type && what.ptr == this;
  }

  const char* name_ = "actor";

private:
  caf::weak_actor_ptr caller_;
  caf::message_id answer_id_;
};

} // namespace

exit_watch::exit_watch(const caf::strong_actor_ptr& target, caf::strong_actor_ptr caller,
                       caf::message_id answer_id)
  : target_(target) {
  if (!target_ || !caller)
    return;
  auto watch = std::make_unique<answer_on_exit>(caf::actor_cast<caf::weak_actor_ptr>(caller),
                                                answer_id);
  if (auto local = dynamic_cast<caf::local_actor*>(target_->get()))
    watch->name_ = local->name();
  token_ = watch.get();
  // Runs actor_exited at once when the target already terminated.
  target_->get()->attach(std::move(watch));
}

exit_watch::~exit_watch() {
  if (token_ != nullptr)
    target_->get()->detach(caf::attachable::token{answer_on_exit::token_type, token_});
}

caf::error exited_error(const char* name, const caf::error& reason) {
  if (reason && reason.category() == error_category)
    return reason;
  return make_error(error_kind::generic,
                    fmt::format("the {} this call waited on terminated{}", name,
                                reason ? ": " + describe(reason) : std::string{}));
}

} // namespace hvactor
