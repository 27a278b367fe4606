// The XLA FFI handlers of ffi_handlers.cc, for the binding to export.
#pragma once

#include "xla/ffi/api/c_api.h"

extern "C" XLA_FFI_Error* RingCollectiveCpu(XLA_FFI_CallFrame* call_frame);
