// libmongoc and libbson, from Debian's libmongoc-dev (pkg-config: libmongoc-1.0).
// Imported only by MongoAttestStore (internal import): no C type reaches a public API.
#ifndef FORMATTEST_CLIBMONGOC_SHIM_H
#define FORMATTEST_CLIBMONGOC_SHIM_H
#include <mongoc/mongoc.h>
#endif
