/* textbook_native.c - the textbook loop of textbook.c, the same source,
 * under other names (pb_textbook_native_*), built -O3 -march=native
 * -ffp-contract=fast (bench/CMakeLists.txt): what `gcc -O3 -march=native`
 * makes of that loop by default (GNU C contracts a*b+c into FMA), so that
 * pe-bench's 'x textbook-native' column shows whether the library, which is
 * never built for the machine it runs on, loses to it. */
#define PB_TEXTBOOK_PREFIX pb_textbook_native_
#include "textbook.c"
