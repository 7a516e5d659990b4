#!/bin/sh
# Prebuild the native op tracer against the installed TensorFlow and print the cached
# library's path. Same as `tf-autopar trace --build` / `python -m tf_autopar.tracing.build`.
# The compile command is: $CXX (default g++) -shared -fPIC -O2 <tf.sysconfig.get_compile_flags()>
#   native/tf_autopar_trace.cc -o <cache>/libtf_autopar_trace.so <tf.sysconfig.get_link_flags()>
set -e
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" -m tf_autopar.tracing.build "$@"
