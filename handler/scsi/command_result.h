// SPDX-License-Identifier: Apache-2.0
// What one SCSI command produced: a SAM status, fixed-format sense data and
// the number of data-in bytes actually filled (the adapter derives the
// residual from it). Plain data, copyable, no allocation.
#pragma once

#include <array>
#include <cstdint>

namespace cowstore::scsi {

// SAM-5 status codes the layer returns.
enum class ScsiStatus : uint8_t {
  kGood = 0x00,
  kCheckCondition = 0x02,
  kBusy = 0x08,
  kReservationConflict = 0x18,
  kTaskSetFull = 0x28,
};

// SPC-4 sense keys.
enum class SenseKey : uint8_t {
  kNoSense = 0x0,
  kRecoveredError = 0x1,
  kNotReady = 0x2,
  kMediumError = 0x3,
  kHardwareError = 0x4,
  kIllegalRequest = 0x5,
  kUnitAttention = 0x6,
  kDataProtect = 0x7,
  kBlankCheck = 0x8,
  kCopyAborted = 0xA,
  kAbortedCommand = 0xB,
  kMiscompare = 0xE,
};

// An additional sense code with its qualifier (ASC << 8 | ASCQ).
struct Asc {
  uint8_t asc = 0;
  uint8_t ascq = 0;
  constexpr bool operator==(const Asc&) const = default;
};

// The ASC/ASCQ pairs the layer uses, named as in SPC-4 Annex F.
namespace asc {
inline constexpr Asc kNoAdditionalSense{0x00, 0x00};
inline constexpr Asc kOperationInProgress{0x00, 0x16};
inline constexpr Asc kLunNotReadyCauseNotReportable{0x04, 0x00};
inline constexpr Asc kUnreachableCopyTarget{0x08, 0x04};
inline constexpr Asc kWriteError{0x0C, 0x00};
inline constexpr Asc kCopyTargetDeviceNotReachable{0x0D, 0x02};
inline constexpr Asc kUnrecoveredReadError{0x11, 0x00};
inline constexpr Asc kMiscompareDuringVerify{0x1D, 0x00};
inline constexpr Asc kParameterListLengthError{0x1A, 0x00};
inline constexpr Asc kInvalidCommandOperationCode{0x20, 0x00};
inline constexpr Asc kLbaOutOfRange{0x21, 0x00};
inline constexpr Asc kInvalidFieldInCdb{0x24, 0x00};
inline constexpr Asc kLogicalUnitNotSupported{0x25, 0x00};
inline constexpr Asc kInvalidFieldInParameterList{0x26, 0x00};
inline constexpr Asc kParameterNotSupported{0x26, 0x01};
inline constexpr Asc kTooManyTargetDescriptors{0x26, 0x06};
inline constexpr Asc kUnsupportedTargetDescriptorTypeCode{0x26, 0x07};
inline constexpr Asc kTooManySegmentDescriptors{0x26, 0x08};
inline constexpr Asc kUnsupportedSegmentDescriptorTypeCode{0x26, 0x09};
inline constexpr Asc kWriteProtected{0x27, 0x00};
inline constexpr Asc kSpaceAllocationFailedWriteProtect{0x27, 0x07};
inline constexpr Asc kMediumMayHaveChanged{0x28, 0x00};  // NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED
inline constexpr Asc kPowerOnResetOccurred{0x29, 0x00};
inline constexpr Asc kPowerOnOccurred{0x29, 0x01};
inline constexpr Asc kModeParametersChanged{0x2A, 0x01};
inline constexpr Asc kCapacityDataHasChanged{0x2A, 0x09};
inline constexpr Asc kThinProvisioningSoftThresholdReached{0x38, 0x07};
inline constexpr Asc kSavingParametersNotSupported{0x39, 0x00};
inline constexpr Asc kInternalTargetFailure{0x44, 0x00};
inline constexpr Asc kMediumRemovalPrevented{0x53, 0x02};
}  // namespace asc

struct CommandResult {
  // Fixed-format sense (response code 0x70) is always 18 bytes.
  static constexpr uint32_t kSenseLength = 18;

  ScsiStatus status = ScsiStatus::kGood;
  // Valid bytes of `sense`: 0 unless status is CHECK CONDITION.
  uint8_t sense_length = 0;
  std::array<uint8_t, kSenseLength> sense{};
  // Bytes of data-in written into the command's buffers, from offset 0.
  // Less than the buffer size means an underflow residual.
  uint32_t data_in_length = 0;

  bool good() const { return status == ScsiStatus::kGood; }
  // Decoders for the sense bytes (tests and logging).
  SenseKey sense_key() const { return static_cast<SenseKey>(sense[2] & 0x0F); }
  Asc additional_sense() const { return Asc{sense[12], sense[13]}; }
  bool information_valid() const { return (sense[0] & 0x80) != 0; }
  uint32_t information() const {
    return uint32_t{sense[3]} << 24 | uint32_t{sense[4]} << 16 | uint32_t{sense[5]} << 8 | sense[6];
  }
  bool sksv() const { return (sense[15] & 0x80) != 0; }
};

}  // namespace cowstore::scsi
