#include "torch_adapter/registration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace opbridge {
namespace {

// A registration object that records its making and undoing in `log`.
struct FakeRegistration {
  FakeRegistration(std::vector<std::string>* log, std::string name) : log_(log), name_(std::move(name)) {
    log_->push_back("register " + name_);
  }
  ~FakeRegistration() { log_->push_back("undo " + name_); }
  FakeRegistration(const FakeRegistration&) = delete;
  FakeRegistration& operator=(const FakeRegistration&) = delete;

  std::vector<std::string>* log_;
  std::string name_;
};

using Registrations = torch_adapter::Registrations<FakeRegistration>;

TEST(Registrations, NewOutsideRegisterOnceMakesNothing) {
  std::vector<std::string> log;
  Registrations registrations;
  EXPECT_EQ(registrations.New(&log, "a"), nullptr);
  EXPECT_TRUE(log.empty());
  EXPECT_FALSE(registrations.Registered());
}

TEST(Registrations, AFailureUndoesEverythingAndALaterCallRegistersAgain) {
  std::vector<std::string> log;
  Registrations registrations;
  EXPECT_THROW(registrations.RegisterOnce([&] {
    ASSERT_NE(registrations.New(&log, "a"), nullptr);
    ASSERT_NE(registrations.New(&log, "b"), nullptr);
    throw std::runtime_error("b is taken");
  }),
               std::runtime_error);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ((std::vector<std::string>{log[0], log[1]}),
            (std::vector<std::string>{"register a", "register b"}));
  std::sort(log.begin() + 2, log.end());
  EXPECT_EQ((std::vector<std::string>{log[2], log[3]}), (std::vector<std::string>{"undo a", "undo b"}));
  EXPECT_FALSE(registrations.Registered());
  EXPECT_EQ(registrations.New(&log, "c"), nullptr);  // no RegisterOnce is running

  log.clear();
  registrations.RegisterOnce([&] { ASSERT_NE(registrations.New(&log, "a"), nullptr); });
  EXPECT_EQ(log, (std::vector<std::string>{"register a"}));  // kept
  EXPECT_TRUE(registrations.Registered());
}

TEST(Registrations, ASuccessIsFinal) {
  std::vector<std::string> log;
  Registrations registrations;
  registrations.RegisterOnce([&] { registrations.New(&log, "a"); });
  int calls = 0;
  registrations.RegisterOnce([&] { ++calls; });
  registrations.UnlessRegistered([&] { ++calls; });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(log, (std::vector<std::string>{"register a"}));
}

TEST(Registrations, UnlessRegisteredRunsBeforeASuccess) {
  Registrations registrations;
  int calls = 0;
  registrations.UnlessRegistered([&] { ++calls; });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace opbridge
