package org.djangojobqueue.client;

import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;

/**
 * SIGTERM and SIGINT handlers for {@link Worker}, through {@code sun.misc.Signal} (module
 * {@code jdk.unsupported}, in every JDK since 9): the signal stops the worker, which drains,
 * and {@code main} then returns normally (exit status 0). Reached by reflection because javac
 * warns on every direct use of it. Where it is missing, {@link #install} answers null and
 * the worker falls back to a shutdown hook (the JVM then exits 143 after the drain).
 */
final class Signals {
    private Signals() {}

    /**
     * Run {@code onSignal} on SIGTERM and SIGINT.
     *
     * @return what puts the previous handlers back, or null when signals cannot be handled
     */
    static Runnable install(Runnable onSignal) {
        try {
            Class<?> signalClass = Class.forName("sun.misc.Signal");
            Class<?> handlerClass = Class.forName("sun.misc.SignalHandler");
            Constructor<?> create = signalClass.getConstructor(String.class);
            Method handle = signalClass.getMethod("handle", signalClass, handlerClass);
            Object handler = Proxy.newProxyInstance(handlerClass.getClassLoader(), new Class<?>[] {handlerClass},
                    (proxy, method, args) -> {
                        switch (method.getName()) {
                            case "handle":
                                onSignal.run();
                                return null;
                            case "hashCode":
                                return System.identityHashCode(proxy);
                            case "equals":
                                return proxy == args[0];
                            default:
                                return "jobqueue worker signal handler";
                        }
                    });
            List<Object[]> previous = new ArrayList<>();
            for (String name : new String[] {"TERM", "INT"}) {
                Object signal = create.newInstance(name);
                previous.add(new Object[] {signal, handle.invoke(null, signal, handler)});
            }
            return () -> {
                for (Object[] entry : previous) {
                    try {
                        handle.invoke(null, entry[0], entry[1]);
                    } catch (ReflectiveOperationException e) {
                        // The JVM refused to put the old handler back: nothing more to do.
                    }
                }
            };
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }
}
