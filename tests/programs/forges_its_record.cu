// forges_its_record.cu: a program that tries to write into the record of its own CUDA calls: it looks for the record
// in its environment, then for the file itself where the course makes it, and appends a host wait it never made.
// tests/test_recorder.py runs it live: the record must not be taken as the recorder's.
#include <glob.h>
#include <unistd.h>
#include "course.cuh"

int main() {
    const char *named = std::getenv("STREAMALLOC_CALLS");
    std::printf("environment: %s\n", named ? named : "none");
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *p = nullptr;
    CHECK(cudaMallocAsync(&p, 64, s));
    CHECK(cudaFreeAsync(p, s));
    glob_t found;
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/calls-*/calls.jsonl";
    if (glob(pattern.c_str(), 0, nullptr, &found) == 0) {
        for (size_t i = 0; i < found.gl_pathc; ++i) {
            if (FILE *f = std::fopen(found.gl_pathv[i], "a")) {
                std::fprintf(f, "{\"seq\":3,\"t\":1,\"pid\":%d,\"tid\":%d,\"call\":\"cudaStreamSynchronize\",\"ret\":0,"
                                "\"stream\":\"%p\"}\n", (int)getpid(), (int)getpid(), (void *)s);
                std::fclose(f);
                std::printf("wrote into %s\n", found.gl_pathv[i]);
            }
        }
        globfree(&found);
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    return 0;
}
