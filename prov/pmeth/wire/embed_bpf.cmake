# cmake -DIN=<object> -DOUT=<c file> -DSYM=<name> -P embed_bpf.cmake
# Writes the object's bytes as a C array <SYM>[] and its length <SYM>_len.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE "${OUT}" "/* generated from ${IN}: do not edit */\n#include <stddef.h>\n"
     "__attribute__((aligned(8))) const unsigned char ${SYM}[] = {\n${body}\n};\nconst size_t ${SYM}_len = ${len};\n")
