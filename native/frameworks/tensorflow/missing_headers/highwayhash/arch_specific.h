// See ../README.md: declarations only, for TensorFlow's xla/printer.h.
#pragma once
#define HH_TARGET_PREFERRED 0
