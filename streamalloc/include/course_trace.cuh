// course_trace.cuh: the course's allocation trace, read and checked with the grammar, limits and messages of
// streamalloc/traces.py (tests/test_traces.py feeds both readers the same files and compares what they say).
// Host code only: a bad trace stops the program (exit status 2) before it makes any CUDA call. No CUDA header,
// so g++ builds it too.
//
//   course::read_trace(path)             the trace: events, blocks, streams, steps, largest, peak
//   course::check_fits(peak, free_bytes) stops the program when the trace's peak is more than the GPU has free
//
// A trace is one event a line: "a <id> <bytes> <stream>", "f <id>", "s" (the end of a step), "# ..." (a comment).
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>
#include <sys/stat.h>

namespace course {

// The limits, the same in traces.py (which says why): ids and streams index the replayer's arrays and streams, and
// below 2**48 bytes no sum of sizes overflows 64 bits.
constexpr uint64_t MAX_BLOCKS = 1u << 20;
constexpr uint64_t MAX_STREAMS = 64;
constexpr uint64_t MAX_BYTES = 1ull << 48;
constexpr uint64_t MAX_EVENTS = 1u << 21;         // events kept, and
constexpr uint64_t MAX_FILE_BYTES = 256ull << 20;  // the file's size, bounded as traces.py bounds them

struct Event { char op; int id; size_t bytes; int stream; };  // op 'a' (id, bytes, stream), 'f' (id) or 's'
struct Trace {
    std::vector<Event> events;
    int blocks = 0, streams = 1, steps = 0;  // blocks and streams: the largest id and stream number, plus one
    size_t largest = 0, peak = 0;            // the largest block; the most bytes allocated at once
};

[[noreturn]] inline void trace_error(const std::string& message) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::exit(2);
}

// The value of a word of decimal digits up to `most`; false for anything else (a sign, a point, too large).
inline bool trace_number(const std::string& word, uint64_t most, uint64_t& value) {
    if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return false;
    const size_t first = std::min(word.find_first_not_of('0'), word.size() - 1);
    if (word.size() - first > 15) return false;  // 10**15 is over 2**48, the largest limit
    value = std::strtoull(word.c_str() + first, nullptr, 10);
    return value <= most;
}

inline std::string trace_quoted(const std::string& line) {
    const char* blanks = " \t\r\f\v";
    const size_t a = line.find_first_not_of(blanks);
    const std::string text = a == std::string::npos ? "" : line.substr(a, line.find_last_not_of(blanks) - a + 1);
    return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

inline Trace read_trace(const char* path) {
    struct stat st;  // only a regular file of a bounded size is read (not a folder, /dev/zero, a pipe), as traces.py
    if (::stat(path, &st) != 0) trace_error(std::string("cannot open the trace ") + path + ": " + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) trace_error(std::string(path) + ": a folder, not a file");
    if (!S_ISREG(st.st_mode)) trace_error(std::string(path) + ": not a regular file (a device, a pipe or a socket)");
    if (st.st_size == 0) trace_error(std::string(path) + ": empty (0 bytes)");
    if (static_cast<uint64_t>(st.st_size) > MAX_FILE_BYTES)
        trace_error(std::string(path) + ": " + std::to_string(st.st_size) + " bytes, over the " +
                    std::to_string(MAX_FILE_BYTES >> 20) + " MiB the course reads");
    std::ifstream in(path, std::ios::binary);
    if (!in) trace_error(std::string("cannot open the trace ") + path + ": " + std::strerror(errno));
    Trace t;
    std::vector<int> alive, freed;  // per block: the line that allocated it while alive, the line that last freed it
    std::vector<uint64_t> size;
    uint64_t held = 0;
    bool allocates = false;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        std::vector<std::string> words;  // split on ASCII blanks, as traces.py does
        for (size_t i = 0; (i = line.find_first_not_of(" \t\r\f\v", i)) != std::string::npos;) {
            const size_t j = std::min(line.find_first_of(" \t\r\f\v", i), line.size());
            words.push_back(line.substr(i, j - i));
            i = j;
        }
        if (words.empty() || words[0][0] == '#') continue;
        const std::string at = std::string(path) + ":" + std::to_string(n) + ": ";
        const std::string& op = words[0];
        if (!((op == "a" && words.size() == 4) || (op == "f" && words.size() == 2) || (op == "s" && words.size() == 1)))
            trace_error(at + "not an event: '" + trace_quoted(line) +
                        "' (an event is \"a <id> <bytes> <stream>\", \"f <id>\" or \"s\")");
        if (t.events.size() == MAX_EVENTS)
            trace_error(at + "more than " + std::to_string(MAX_EVENTS) + " events: a trace holds at most " +
                        std::to_string(MAX_EVENTS));
        if (op == "s") {
            t.events.push_back({'s', -1, 0, 0});
            ++t.steps;
            continue;
        }
        uint64_t id = 0, bytes = 0, stream = 0;
        if (!trace_number(words[1], MAX_BLOCKS - 1, id))
            trace_error(at + "the block id '" + words[1] + "' is not a whole number from 0 to " +
                        std::to_string(MAX_BLOCKS - 1));
        if (id >= alive.size()) alive.resize(id + 1, 0), freed.resize(id + 1, 0), size.resize(id + 1, 0);
        if (op == "f") {
            if (!alive[id])
                trace_error(at + "frees block " + std::to_string(id) + ", which is not allocated: " +
                            (freed[id] ? "line " + std::to_string(freed[id]) + " freed it already"
                                       : std::string("it was never allocated")));
            alive[id] = 0;
            freed[id] = n;
            held -= size[id];
            t.events.push_back({'f', static_cast<int>(id), 0, 0});
            continue;
        }
        if (!trace_number(words[2], MAX_BYTES, bytes) || bytes == 0)
            trace_error(at + "the size '" + words[2] + "' is not a whole number of bytes from 1 to 2**48");
        if (!trace_number(words[3], MAX_STREAMS - 1, stream))
            trace_error(at + "the stream '" + words[3] + "' is not a whole number from 0 to " +
                        std::to_string(MAX_STREAMS - 1));
        if (alive[id])
            trace_error(at + "allocates block " + std::to_string(id) + ", which is still allocated (since line " +
                        std::to_string(alive[id]) + ")");
        held += bytes;
        if (held > MAX_BYTES)
            trace_error(at + "with this allocation the trace holds " + std::to_string(held) +
                        " bytes at once, over 2**48");
        alive[id] = n;
        size[id] = bytes;
        allocates = true;
        t.events.push_back({'a', static_cast<int>(id), static_cast<size_t>(bytes), static_cast<int>(stream)});
        t.blocks = std::max(t.blocks, static_cast<int>(id) + 1);
        t.streams = std::max(t.streams, static_cast<int>(stream) + 1);
        t.largest = std::max(t.largest, static_cast<size_t>(bytes));
        t.peak = std::max(t.peak, static_cast<size_t>(held));
    }
    if (!allocates) trace_error(std::string(path) + ": no allocation: a trace needs at least one line \"a <id> <bytes> <stream>\"");
    if (!t.steps) trace_error(std::string(path) + ": no step: a trace needs at least one line \"s\" (the end of a step)");
    return t;
}

// After cudaMemGetInfo: a trace whose peak is more than the GPU has free cannot be replayed here; say so, as
// traces.check_fits does, rather than fail at an allocation halfway through.
inline void check_fits(size_t peak, size_t free_bytes) {
    if (peak <= free_bytes) return;
    char text[160];
    std::snprintf(text, sizeof text, "the trace needs %.1f MiB at its peak; this GPU has %.1f MiB free",
                  peak / 1048576.0, free_bytes / 1048576.0);
    trace_error(text);
}

}  // namespace course
