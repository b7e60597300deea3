#pragma once
/// Versioning and namespace macros shared by every specgen header.
///
/// Everything public lives in `specgen::v0` (an inline namespace), so two
/// incompatible builds of the library linked into one program fail at link
/// time instead of misbehaving at run time.

#define SPECGEN_VERSION_MAJOR 0
#define SPECGEN_VERSION_MINOR 1
#define SPECGEN_VERSION_PATCH 0
// "MAJOR.MINOR.PATCH", made from the three numbers above (the only place the version is written).
#define SPECGEN_STRINGIFY_(x) #x
#define SPECGEN_STRINGIFY(x) SPECGEN_STRINGIFY_(x)
#define SPECGEN_VERSION_STRING                                                            \
  SPECGEN_STRINGIFY(SPECGEN_VERSION_MAJOR) "." SPECGEN_STRINGIFY(SPECGEN_VERSION_MINOR) "." \
      SPECGEN_STRINGIFY(SPECGEN_VERSION_PATCH)

#define SPECGEN_BEGIN_NAMESPACE \
  namespace specgen {           \
  inline namespace v0 {
#define SPECGEN_END_NAMESPACE \
  }                           \
  }
