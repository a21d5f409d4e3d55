/** A clock tests move by hand: crash logic is tested by writing time, not waiting for it. */
export function manualClock(start = Date.UTC(2026, 0, 1)) {
  let t = start;
  const clock = () => t;
  clock.advance = (ms: number) => {
    t += ms;
  };
  clock.set = (ms: number) => {
    t = ms;
  };
  return clock;
}
export type ManualClock = ReturnType<typeof manualClock>;
