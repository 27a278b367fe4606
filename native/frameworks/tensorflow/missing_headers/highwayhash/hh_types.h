// See ../README.md: declarations only, for TensorFlow's xla/printer.h.
#pragma once
