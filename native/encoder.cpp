// Placeholder: filled by its own issue. Registers nothing yet.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void register_encoder(nb::module_ &m) { (void)m; }
